// host_memory.hpp — the host memory a training batch needs against what the node has, checked
// before the first step so that a batch too large is one line naming the key to change.
#pragma once

#include <cstdint>
#include <string>

namespace ringtrain::train {

// What this process may still allocate: MemAvailable from /proc/meminfo, or less where a
// cgroup (v2 memory.max, v1 memory.limit_in_bytes) caps the job below it. RINGTRAIN_HOST_MEMORY
// (bytes) replaces both, for tests.
struct HostMemory {
  int64_t available_bytes = -1;  // -1: not known (no /proc/meminfo); nothing is checked
  std::string source;            // "MemAvailable" or "cgroup memory.max" ...
};
HostMemory host_memory();

// One rank's memory for training: fixed bytes (weights, their gradients and optimizer state,
// runtime) plus per_image bytes for each image of its batch.
struct BatchMemory {
  int64_t per_image_bytes = 0;
  int64_t fixed_bytes = 0;
  int batch_per_rank = 0;
  int ranks_on_node = 1;  // they share the node's memory
};

// The largest batch per rank whose memory fits this rank's share of `available` (90 % of it over
// the node's ranks; 0: none).
int64_t largest_batch_per_rank(const BatchMemory& need, int64_t available_bytes);

// "" when the batch fits; else the one-line error naming the key the deck sets
// (train.batch_per_rank, or train.global_batch with its largest value: ranks x accumulate x
// the largest batch per rank), the need, what is available and the largest batch that fits.
std::string batch_memory_error(const BatchMemory& need, const HostMemory& memory,
                               const std::string& what, bool global_batch_key, int world_size,
                               int accumulate_steps);

}  // namespace ringtrain::train
