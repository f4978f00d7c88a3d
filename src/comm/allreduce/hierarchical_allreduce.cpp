// hierarchical_allreduce.cpp — node-local reduce, ring across node leaders, node-local broadcast.
#include "ringtrain/comm/allreduce/hierarchical_allreduce.hpp"

#include <algorithm>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm::allreduce {

HierarchicalAllreduce::HierarchicalAllreduce(const Communicator& comm,
                                             const AllreduceOptions& options)
    : world_(duplicate(comm.raw())), options_(options) {
  const int rank = comm.rank();
  const int node = options.ranks_per_node > 0 ? rank / options.ranks_per_node : comm.node_index();
  MPI_Comm local = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(world_.get(), node, rank, &local));
  local_ = CommHandle(local);
  MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MPI_CHECK(MPI_Comm_split(world_.get(), local_rank_ == 0 ? 0 : MPI_UNDEFINED, node, &leaders));
  if (leaders == MPI_COMM_NULL) return;
  leaders_ = CommHandle(leaders);
  MPI_CHECK(MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN));
  int n = 1;
  MPI_CHECK(MPI_Comm_size(leaders, &n));
  std::vector<int> ring(n);
  for (int i = 0; i < n; ++i) ring[i] = i;  // leaders ordered by node index
  AllreduceOptions ring_options = options;
  ring_options.validate_counts = false;  // checked once, over the world, in sum()
  ring_ = std::make_unique<RingAllreduce>(leaders, ring, ring_options);
}

void HierarchicalAllreduce::sum(float* data, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.validate_counts) check_same_count(world_.get(), count, "hierarchical allreduce");
  if (count == 0) return;
  for (size_t done = 0; done < count && local_size_ > 1; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min(kMaxMpiPiece, count - done));
    if (local_rank_ == 0)
      MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data + done, piece, MPI_FLOAT, MPI_SUM, 0, local_.get()));
    else
      MPI_CHECK(MPI_Reduce(data + done, nullptr, piece, MPI_FLOAT, MPI_SUM, 0, local_.get()));
  }
  if (ring_) ring_->sum(data, count);
  for (size_t done = 0; done < count && local_size_ > 1; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min(kMaxMpiPiece, count - done));
    MPI_CHECK(MPI_Bcast(data + done, piece, MPI_FLOAT, 0, local_.get()));
  }
}

std::string HierarchicalAllreduce::name() const {
  return options_.wire == Wire::fp32 ? "hierarchical" : "hierarchical/" + to_string(options_.wire);
}

void HierarchicalAllreduce::set_spin_hint(const std::atomic<bool>* hint) {
  if (ring_) ring_->set_spin_hint(hint);
}

}  // namespace ringtrain::comm::allreduce
