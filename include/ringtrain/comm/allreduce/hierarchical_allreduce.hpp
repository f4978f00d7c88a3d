// hierarchical_allreduce.hpp — reduce to each node's leader, a ring across the leaders, and a
// broadcast back inside each node.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

// MPI_Reduce on the node's group, RingAllreduce over the leaders (options.wire applies there),
// MPI_Bcast inside the node. Every rank ends with the leaders' ring result, itself bitwise
// identical on every leader.
class HierarchicalAllreduce final : public Allreducer {
 public:
  // Collective over comm (duplicated here). Nodes are comm's, or consecutive groups of
  // options.ranks_per_node ranks when that is > 0.
  HierarchicalAllreduce(const Communicator& comm, const AllreduceOptions& options);
  void sum(float* data, size_t count) override;
  std::string name() const override;
  void set_spin_hint(const std::atomic<bool>* hint) override;

 private:
  CommHandle world_, local_, leaders_;
  AllreduceOptions options_;
  int local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<RingAllreduce> ring_;  // leaders only
  std::mutex mutex_;
};

}  // namespace ringtrain::comm::allreduce
