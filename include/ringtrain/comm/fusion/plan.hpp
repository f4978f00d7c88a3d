// plan.hpp — the fusion schedule every rank must share: gradient specs, the buckets they are
// laid out in, the schedule's fingerprint and serialisation, and the one-time agreement
// across ranks that turns a mismatch into an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::comm {
class CommHandle;
}

namespace ringtrain::comm::fusion {

struct GradSpec {  // an fp32 gradient
  std::string name;
  std::vector<int64_t> shape;
};

// Where a bucket lives: gradients first_tensor .. first_tensor + tensor_count - 1, each at a
// 64-byte aligned offset (the zero padding between them is reduced too and stays zero).
struct BucketLayout {
  size_t first_tensor;
  size_t tensor_count;
  size_t bytes;
  float* data;
};

// "conv1.weight [8, 3, 3, 3]": how messages name a gradient.
std::string spec_text(const GradSpec& spec);
// The gradient's element count; Error naming it when a dimension is negative or it is huge.
size_t element_count(const GradSpec& spec);

// FNV-1a over everything that must agree: count, names, shapes, dtype.
uint64_t fingerprint(const std::vector<GradSpec>& specs);
std::string serialize(const std::vector<GradSpec>& specs);
// Error when text is not what serialize() wrote.
std::vector<GradSpec> deserialize(const std::string& text);
// "rank 2 differs from rank 0 at gradient 3: rank 2 has ... but rank 0 has ...".
std::string describe_difference(const std::vector<GradSpec>& root,
                                const std::vector<GradSpec>& mine, int me);

// A deck setting that shapes the buckets and so must be equal on every rank.
struct AgreedSetting {
  const char* key;  // "fusion_mib": reported as comm.<key>
  double value;
};

// Collective over comm, once per engine: every rank must build the same buckets, or the
// reductions would pair up different data (or hang). Compares the settings and the schedule's
// fingerprint across ranks; a problem with one rank's own specs (a bad shape, a name twice)
// is thrown on every rank too. Throws ringtrain::Error with the same message on every rank,
// naming the first rank that differs and the setting or tensor where it differs from rank 0.
void agree_on_plan(const CommHandle& comm, const std::vector<GradSpec>& specs,
                   const std::vector<AgreedSetting>& settings);

}  // namespace ringtrain::comm::fusion
