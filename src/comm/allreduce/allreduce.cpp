// allreduce.cpp — the Allreducer interface's shared pieces: the default mean, the chunk rule,
// option and rank-order checks and algorithm names.
#include "ringtrain/comm/allreduce/allreduce.hpp"

#include <algorithm>
#include <vector>

#include "ringtrain/comm/allreduce/pipeline.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {

void Allreducer::sum_and_divide(float* data, size_t count, float divisor) {
  sum(data, count);
  if (divisor != 1.0f) divide_floats(data, count, divisor);
}

// Past the last-level cache the adds want chunks that stay in L2 while they are summed; below
// it, fewer and larger messages cost less. Measurements: docs/TUNING.md, "Chunk size".
size_t chunk_bytes_for(size_t configured, size_t message_bytes) {
  if (configured > 0) return configured;
  return message_bytes >= (16u << 20) ? (256u << 10) : (1u << 20);
}

std::string wait_text(const PipelineProgress& progress, int from, int to) {
  const auto get = [](const std::atomic<int64_t>& v) { return v.load(std::memory_order_relaxed); };
  return str("received ", get(progress.recvs_done), " of ", get(progress.recvs),
             " messages from rank ", from, ", sent ", get(progress.sends_done), " of ",
             get(progress.sends), " to rank ", to);
}

void check_pipeline_options(const AllreduceOptions& options) {
  RT_REQUIRE_INPUT(
      options.chunk_bytes == 0 ||
          (options.chunk_bytes >= 4 && options.chunk_bytes <= (size_t(1) << 30)),
      "allreduce chunk size must be 0 (by message size) or between 4 bytes and 1 GiB, not ",
      options.chunk_bytes, " bytes");
  RT_REQUIRE_INPUT(options.chunks_in_flight >= 1 && options.chunks_in_flight <= 64,
                   "allreduce chunks in flight must be between 1 and 64, not ",
                   options.chunks_in_flight);
}

int position_in_order(const std::vector<int>& order, int n, int rank, const char* what) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = static_cast<int>(sorted.size()) == n;
  for (int i = 0; permutation && i < n; ++i) permutation = sorted[i] == i;
  RT_CHECK(permutation, what, " order must list each of the ", n, " ranks once");
  return static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
}

Algorithm parse_algorithm(const std::string& text) {
  if (text == "ring") return Algorithm::ring;
  if (text == "rhd") return Algorithm::rhd;
  if (text == "auto") return Algorithm::automatic;
  if (text == "mpi") return Algorithm::mpi;
  if (text == "hierarchical") return Algorithm::hierarchical;
  if (text == "nccl") return Algorithm::nccl;
  throw InputError(str("unknown allreduce algorithm '", text,
                       "': choose ring, rhd, auto, mpi, hierarchical or nccl"));
}

std::string to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring:
      return "ring";
    case Algorithm::rhd:
      return "rhd";
    case Algorithm::automatic:
      return "auto";
    case Algorithm::mpi:
      return "mpi";
    case Algorithm::hierarchical:
      return "hierarchical";
    case Algorithm::nccl:
      return "nccl";
  }
  return "unknown";
}

}  // namespace ringtrain::comm::allreduce
