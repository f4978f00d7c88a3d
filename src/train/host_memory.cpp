// host_memory.cpp — MemAvailable and the cgroup limit, and the batch that fits in them.
#include "ringtrain/train/host_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {
namespace {

// The first integer of a one-line file, or -1 ("max", missing, unreadable).
int64_t read_bytes(const std::string& path) {
  std::ifstream in(path);
  long long value = -1;
  if (!(in >> value)) return -1;
  return value;
}

// Bytes as people read them: "33.6 GB".
std::string gigabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", double(bytes) / 1e9);
  return text;
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", double(bytes) / 1e6);
  return text;
}

}  // namespace

HostMemory host_memory() {
  HostMemory memory;
  // Tests set the node's memory, so that the message (and its largest batch) is exact.
  if (const char* given = std::getenv("RINGTRAIN_HOST_MEMORY")) {
    memory.available_bytes = std::atoll(given);
    memory.source = "RINGTRAIN_HOST_MEMORY";
    return memory;
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) {
      memory.available_bytes = int64_t(kib) * 1024;
      memory.source = "MemAvailable";
    }
  }
  // A job's cgroup may allow less than the machine has free: the kernel's OOM killer ends the
  // rank at the cgroup's limit, whatever MemAvailable says.
  struct Limit {
    const char* max;
    const char* current;
    const char* name;
  };
  for (const Limit& cg :
       {Limit{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "cgroup memory.max"},
        Limit{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
              "/sys/fs/cgroup/memory/memory.usage_in_bytes", "cgroup memory.limit_in_bytes"}}) {
    const int64_t limit = read_bytes(cg.max), used = read_bytes(cg.current);
    if (limit <= 0 || used < 0) continue;  // "max": no limit
    const int64_t left = std::max<int64_t>(limit - used, 0);
    if (memory.available_bytes < 0 || left < memory.available_bytes) {
      memory.available_bytes = left;
      memory.source = cg.name;
    }
  }
  return memory;
}

// The share of the node's available memory a rank may plan for: 90 %, since the estimate
// leaves out layouts' padding and the page cache the shards need.
int64_t rank_share(int64_t available_bytes, int ranks_on_node) {
  return available_bytes / 10 * 9 / std::max(ranks_on_node, 1);
}

int64_t largest_batch_per_rank(const BatchMemory& need, int64_t available_bytes) {
  const int64_t share = rank_share(available_bytes, need.ranks_on_node) - need.fixed_bytes;
  if (share <= 0 || need.per_image_bytes <= 0) return 0;
  return share / need.per_image_bytes;
}

std::string batch_memory_error(const BatchMemory& need, const HostMemory& memory,
                               const std::string& what, bool global_batch_key, int world_size,
                               int accumulate_steps) {
  if (memory.available_bytes < 0) return "";
  const int64_t wanted = need.fixed_bytes + need.per_image_bytes * need.batch_per_rank;
  if (wanted <= rank_share(memory.available_bytes, need.ranks_on_node)) return "";
  const int64_t fits = largest_batch_per_rank(need, memory.available_bytes);
  const int64_t per_step = int64_t(world_size) * accumulate_steps;
  const std::string key = global_batch_key ? "train.global_batch" : "train.batch_per_rank";
  const int64_t value =
      global_batch_key ? int64_t(need.batch_per_rank) * per_step : int64_t(need.batch_per_rank);
  const int64_t largest = global_batch_key ? fits * per_step : fits;
  std::ostringstream out;
  out << key << " = " << value << " needs about " << gigabytes(wanted)
      << " of host memory per rank (" << what << ": " << megabytes(need.per_image_bytes)
      << " per image), but this node has " << gigabytes(memory.available_bytes) << " for "
      << need.ranks_on_node << (need.ranks_on_node == 1 ? " rank (" : " ranks (") << memory.source
      << "); ";
  if (largest > 0)
    out << "set " << key << " to at most " << largest;
  else
    out << "no batch fits: free memory or run fewer ranks per node";
  return out.str();
}

}  // namespace ringtrain::train
