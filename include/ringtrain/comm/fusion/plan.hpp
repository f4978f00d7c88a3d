// plan.hpp — the fusion schedule every rank must share: gradient specs, the buckets they are
// laid out in, the schedule's fingerprint and serialisation, and the one-time agreement
// across ranks that turns a mismatch into an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/comm/agreement.hpp"

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

// FNV-1a (core/hash.hpp) over everything that must agree: count, names, shapes, dtype.
uint64_t fingerprint(const std::vector<GradSpec>& specs);
std::string serialize(const std::vector<GradSpec>& specs);
// Error when text is not what serialize() wrote.
std::vector<GradSpec> deserialize(const std::string& text);
// The first gradient where two schedules differ, as comm/agreement words it: key "the fusion
// plan's gradient 3", a = this rank's ("fc1.weight [128, 1024]" or "no gradient 3 (only 3)"),
// b = rank 0's.
KeyDifference first_plan_difference(const std::vector<GradSpec>& mine,
                                    const std::vector<GradSpec>& root);

// A deck setting that shapes the buckets and so must be equal on every rank.
struct AgreedSetting {
  const char* key;  // "fusion_mib": reported as comm.<key>
  double value;
};

// Collective over comm, once per engine: every rank must build the same buckets, or the
// reductions would pair up different data (or hang). Compares the settings and the schedule's
// fingerprint across ranks; a problem with one rank's own specs (a bad shape, a name twice)
// is thrown on every rank too. Throws ringtrain::Error with the same message on every rank,
// "ranks disagree on comm.fusion_mib: ..." or "ranks disagree on the fusion plan's gradient 3:
// rank 2 has ..., rank 0 has ...; ranks 3, 4 differ from rank 0 too (...)".
void agree_on_plan(const CommHandle& comm, const std::vector<GradSpec>& specs,
                   const std::vector<AgreedSetting>& settings);

}  // namespace ringtrain::comm::fusion
