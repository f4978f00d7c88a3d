// auto_allreduce.hpp — per call, rhd, ring or hierarchical by message size and topology.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/halving_doubling.hpp"
#include "ringtrain/comm/allreduce/hierarchical_allreduce.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

// Where the ranks are, as auto sees it: how many, on how many nodes, the most on one node.
struct Topology {
  int world_size = 1;
  int nodes = 1;
  int max_ranks_per_node = 1;
};

// What auto runs for one call of `bytes` (fp32): ring, rhd or hierarchical. The rules and the
// measurements behind them: docs/TUNING.md, "auto: ring, rhd or hierarchical".
Algorithm choose_automatic(size_t bytes, const Topology& topology);
// One node (or the topology unknown): world_size ranks.
inline Algorithm choose_automatic(size_t bytes, int world_size) {
  return choose_automatic(bytes, Topology{world_size, 1, world_size});
}

class AutoAllreduce final : public Allreducer {
 public:
  // Collective over comm (duplicated here, and by the algorithms inside). The nodes are the
  // real ones, or options.ranks_per_node consecutive ranks where that is > 0.
  AutoAllreduce(const Communicator& comm, const AllreduceOptions& options);
  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }
  void sum_and_divide(float* data, size_t count, float divisor) override;
  std::string name() const override;
  // What choose_automatic decides from: the same on every rank (one MPI_MAX at construction).
  const Topology& topology() const { return topology_; }
  void set_spin_hint(const std::atomic<bool>* hint) override;
  // The ring's (one node, fp32 wire): calls on data in them go to the ring at every size.
  std::shared_ptr<float> shared_buffers(size_t bytes) override {
    return ring_->shared_buffers(bytes);
  }
  // The sum of the algorithms' (Allreducer::progress).
  uint64_t progress() const override;
  // "auto chose ring: " and the chosen algorithm's own report.
  std::string on_stall() override;

 private:
  Allreducer& chosen_for(const float* data, size_t count);

  CommHandle comm_;
  AllreduceOptions options_;
  Topology topology_;
  std::unique_ptr<RingAllreduce> ring_;
  std::unique_ptr<HalvingDoubling> rhd_;
  std::unique_ptr<HierarchicalAllreduce> hierarchical_;  // only where auto may choose it
  std::mutex mutex_;
  std::atomic<Allreducer*> running_{nullptr};  // the call in progress, for on_stall()
};

}  // namespace ringtrain::comm::allreduce
