// plan.cpp — gradient specs as messages name them, the schedule's fingerprint and
// serialisation, and the agreement on the plan across ranks.
#include "ringtrain/comm/fusion/plan.hpp"

#include <cstring>
#include <unordered_set>

#include "names.hpp"
#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/core/error.hpp"

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

// What every rank sends to every other: enough to find the first rank that differs.
struct Summary {
  uint64_t fingerprint;
  uint64_t has_local_error;  // 64 bits: no padding goes on the wire
};

std::vector<uint8_t> encode_summary(const Summary& summary, const std::vector<AgreedSetting>& set) {
  std::vector<uint8_t> out(sizeof summary + set.size() * sizeof(double));
  std::memcpy(out.data(), &summary, sizeof summary);
  for (size_t k = 0; k < set.size(); ++k)
    std::memcpy(out.data() + sizeof summary + k * sizeof(double), &set[k].value, sizeof(double));
  return out;
}

double setting_of(const uint8_t* record, size_t k) {
  double value;
  std::memcpy(&value, record + sizeof(Summary) + k * sizeof(double), sizeof value);
  return value;
}

// Rare path: rank 0 sends its schedule; the first differing rank finds the first difference
// and every rank throws the message that rank wrote.
[[noreturn]] void throw_schedule_mismatch(MPI_Comm comm, int me, const std::vector<GradSpec>& specs,
                                          const std::vector<int>& differing) {
  std::string root_text = me == 0 ? serialize(specs) : std::string();
  broadcast_bytes(comm, root_text, 0);
  const int first = differing.front();
  std::string message;
  if (me == first) {
    message = "fusion plan mismatch: " + describe_difference(deserialize(root_text), specs, first);
    if (differing.size() > 1)
      message +=
          str(" (", differing.size(), " ranks differ from rank 0: ", ranks_text(differing), ")");
    message +=
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
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      h ^= static_cast<const unsigned char*>(data)[i];
      h *= 1099511628211ull;
    }
  };
  uint64_t count = specs.size();
  mix(&count, sizeof count);
  for (const auto& spec : specs) {
    mix(spec.name.c_str(), spec.name.size() + 1);
    uint64_t rank = spec.shape.size();
    mix(&rank, sizeof rank);
    mix(spec.shape.data(), spec.shape.size() * sizeof(int64_t));
    mix("f32", 3);
  }
  return h;
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

std::string describe_difference(const std::vector<GradSpec>& root,
                                const std::vector<GradSpec>& mine, int me) {
  size_t i = 0;
  while (i < root.size() && i < mine.size() && root[i].name == mine[i].name &&
         root[i].shape == mine[i].shape)
    ++i;
  auto at = [i](const std::vector<GradSpec>& specs) {
    return i < specs.size() ? spec_text(specs[i])
                            : str("no gradient ", i, " (only ", specs.size(), ")");
  };
  return str("rank ", me, " differs from rank 0 at gradient ", i, ": rank ", me, " has ", at(mine),
             " but rank 0 has ", at(root));
}

void agree_on_plan(const CommHandle& handle, const std::vector<GradSpec>& specs,
                   const std::vector<AgreedSetting>& settings) {
  const MPI_Comm comm = handle.get();
  int me = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &me));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  std::string local_error = check_own_specs(specs);
  const Summary mine{fingerprint(specs), local_error.empty() ? 0u : 1u};
  const std::vector<uint8_t> record = encode_summary(mine, settings);
  const size_t bytes = record.size();
  std::vector<uint8_t> all(bytes * size_t(world));
  MPI_CHECK(
      MPI_Allgather(record.data(), int(bytes), MPI_BYTE, all.data(), int(bytes), MPI_BYTE, comm));
  auto summary_of = [&](int r) {
    Summary s;
    std::memcpy(&s, all.data() + size_t(r) * bytes, sizeof s);
    return s;
  };

  for (int r = 0; r < world; ++r) {
    if (!summary_of(r).has_local_error) continue;
    broadcast_bytes(comm, local_error, r);
    throw Error(str("fusion plan: rank ", r, ": ", local_error));
  }
  // The trainer's ranks agreed on the whole deck at start (train/config_agreement.hpp); this
  // is the same check, in the same words, for the settings that shape the buckets, wherever an
  // engine is made.
  for (int r = 1; r < world; ++r)
    for (size_t k = 0; k < settings.size(); ++k) {
      const double theirs = setting_of(all.data() + size_t(r) * bytes, k);
      const double root_value = setting_of(all.data(), k);
      if (theirs != root_value)
        throw Error(str("ranks disagree on comm.", settings[k].key, ": rank ", r, " has ", theirs,
                        ", rank 0 has ", root_value, " (every rank must read the same deck)"));
    }

  std::vector<int> differing;
  for (int r = 1; r < world; ++r)
    if (summary_of(r).fingerprint != summary_of(0).fingerprint) differing.push_back(r);
  if (!differing.empty()) throw_schedule_mismatch(comm, me, specs, differing);
}

}  // namespace ringtrain::comm::fusion
