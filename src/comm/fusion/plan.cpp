// plan.cpp — gradient specs as messages name them, the schedule's fingerprint and
// serialisation, and what the plan's agreement across ranks compares (comm/agreement does the
// comparing and the wording).
#include "ringtrain/comm/fusion/plan.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::comm::fusion {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

// The first problem with this rank's own specs ("" if none): a bad shape or a name twice.
std::string check_own_specs(const std::vector<GradSpec>& specs) {
  try {
    std::unordered_set<std::string> names;
    for (const auto& spec : specs) {
      element_count(spec);
      RT_CHECK(names.insert(spec.name).second, "gradient name ", spec.name,
               " appears twice in the fusion plan; names must be unique");
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The lowest rank whose own specs have a problem: its message, thrown on every rank.
void fail_together_on_own_errors(MPI_Comm comm, int me, int world, std::string local_error) {
  int first = local_error.empty() ? world : me;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == world) return;
  broadcast_bytes(comm, local_error, first);
  throw Error(str("fusion plan: rank ", first, ": ", local_error));
}

// The shortest text that reads back as exactly this value ("0.5", "2"): settings are compared
// as text, so two values that print alike must be equal.
std::string exact_text(double value) {
  char text[32];
  for (int digits = 6; digits < 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) return text;
  }
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string settings_text(const std::vector<AgreedSetting>& settings) {
  std::string text;
  for (const AgreedSetting& s : settings)
    text += str("comm.", s.key, " = ", exact_text(s.value), "\n");
  return text;
}

// Rare path: rank 0 sends its schedule; the first differing rank finds the first difference
// and every rank throws the line that rank wrote.
[[noreturn]] void throw_schedule_mismatch(MPI_Comm comm, int me, const std::vector<GradSpec>& specs,
                                          const std::vector<int>& differing) {
  std::string root_text = me == 0 ? serialize(specs) : std::string();
  broadcast_bytes(comm, root_text, 0);
  const int first = differing.front();
  std::string message;
  if (me == first) {
    const KeyDifference d = first_plan_difference(specs, deserialize(root_text));
    message = disagreement_line(d.key, differing, d.a, d.b) +
              " (every rank must plan the same gradients, in the same order, with the same shapes)";
  }
  broadcast_bytes(comm, message, first);
  throw Error(message);
}

}  // namespace

std::string spec_text(const GradSpec& spec) {
  return spec.name + " " + shape_text(spec.shape);
}

size_t element_count(const GradSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) {
    RT_CHECK(d >= 0 && d < (int64_t(1) << 40), "gradient ", spec.name, " has a bad shape ",
             shape_text(spec.shape));
    n *= size_t(d);
  }
  RT_CHECK(n < (size_t(1) << 40), "gradient ", spec.name,
           " is too large: ", shape_text(spec.shape));
  return n;
}

uint64_t fingerprint(const std::vector<GradSpec>& specs) {
  Fnv1a h;
  const uint64_t count = specs.size();
  h.add(&count, sizeof count);
  for (const auto& spec : specs) {
    h.add(spec.name.c_str(), spec.name.size() + 1);
    const uint64_t rank = spec.shape.size();
    h.add(&rank, sizeof rank);
    h.add(spec.shape.data(), spec.shape.size() * sizeof(int64_t));
    h.add("f32", 3);
  }
  return h.value();
}

std::string serialize(const std::vector<GradSpec>& specs) {
  std::string out;
  auto put = [&out](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
  };
  for (const auto& spec : specs) {
    uint64_t name_size = spec.name.size(), rank = spec.shape.size();
    put(&name_size, sizeof name_size);
    put(spec.name.data(), name_size);
    put(&rank, sizeof rank);
    put(spec.shape.data(), rank * sizeof(int64_t));
  }
  return out;
}

std::vector<GradSpec> deserialize(const std::string& text) {
  std::vector<GradSpec> specs;
  size_t at = 0;
  auto get = [&](void* data, size_t size) {
    RT_CHECK(at + size <= text.size(), "fusion plan: truncated schedule from rank 0");
    std::memcpy(data, text.data() + at, size);
    at += size;
  };
  while (at < text.size()) {
    GradSpec spec;
    uint64_t name_size = 0, rank = 0;
    get(&name_size, sizeof name_size);
    RT_CHECK(name_size <= text.size() - at, "fusion plan: truncated schedule from rank 0");
    spec.name.resize(name_size);
    get(spec.name.data(), name_size);
    get(&rank, sizeof rank);
    RT_CHECK(rank <= (text.size() - at) / sizeof(int64_t),
             "fusion plan: truncated schedule from rank 0");
    spec.shape.resize(rank);
    get(spec.shape.data(), rank * sizeof(int64_t));
    specs.push_back(std::move(spec));
  }
  return specs;
}

KeyDifference first_plan_difference(const std::vector<GradSpec>& mine,
                                    const std::vector<GradSpec>& root) {
  size_t i = 0;
  while (i < root.size() && i < mine.size() && root[i].name == mine[i].name &&
         root[i].shape == mine[i].shape)
    ++i;
  auto at = [i](const std::vector<GradSpec>& specs) {
    return i < specs.size() ? spec_text(specs[i])
                            : str("no gradient ", i, " (only ", specs.size(), ")");
  };
  return {str("the fusion plan's gradient ", i), at(mine), at(root)};
}

void agree_on_plan(const CommHandle& handle, const std::vector<GradSpec>& specs,
                   const std::vector<AgreedSetting>& settings) {
  const MPI_Comm comm = handle.get();
  int me = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &me));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  fail_together_on_own_errors(comm, me, world, check_own_specs(specs));
  // The trainer's ranks agreed on the whole deck at start (train/config_agreement.hpp); this
  // is the same check, in the same words, for the settings that shape the buckets, wherever an
  // engine is made.
  const std::string disagreement = disagreement_on_keys(handle, settings_text(settings));
  if (!disagreement.empty()) throw Error(disagreement + " (every rank must read the same deck)");
  const std::vector<int> differing = ranks_unlike_root(handle, fingerprint(specs));
  if (!differing.empty()) throw_schedule_mismatch(comm, me, specs, differing);
}

}  // namespace ringtrain::comm::fusion
