// local_gate.hpp — a rendezvous of the ranks on one node that waits asleep (futex), not polling.
//
// Why: OpenMPI waits by polling. A comm thread that starts a bucket's reduction before a slower
// peer has finished that bucket's gradients spins inside MPI until the peer comes, for as
// long as the peer's backward takes. That core is then never idle: with one core per rank the
// spin competes with this rank's own compute, and where two ranks' cores share a physical core
// (hyperthreads, or virtual CPUs that the host places so) it slows the very rank everyone waits
// for (measured: docs/TUNING.md, "The node gate").
//
// So before each reduction, every rank on the node publishes a ticket in shared memory and
// sleeps in futex_wait until every local peer has published the same ticket; then the
// reduction starts with all of them present and MPI's own waits last only as long as the data
// takes to move. Ranks on other nodes are not gated (a futex does not cross nodes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm

namespace ringtrain::comm::shm {

class SharedSegment;

class LocalGate {
 public:
  // Collective over comm. The node's ranks share one small POSIX shared-memory segment. If a
  // rank cannot map it, no rank of that node gates (active() is false) and `problem` says why.
  explicit LocalGate(MPI_Comm comm);
  ~LocalGate();  // unmaps; not collective, so it is safe on any unwinding path
  LocalGate(const LocalGate&) = delete;
  LocalGate& operator=(const LocalGate&) = delete;

  // False on a node with this rank alone, or when the segment could not be set up.
  bool active() const { return segment_ != nullptr; }
  int local_size() const { return local_size_; }
  const std::string& problem() const { return problem_; }

  // Publishes this rank's arrival at `ticket` (1, 2, 3, ...: one more per call, the same
  // sequence on every rank) and sleeps until every rank on the node has arrived at it.
  // Tickets compare modulo 2^32, so the sequence may wrap.
  void arrive_and_wait(uint32_t ticket);

 private:
  std::atomic<uint32_t>& slot(int local_rank) const;

  int local_rank_ = 0;
  int local_size_ = 1;
  std::unique_ptr<SharedSegment> segment_;  // local_size_ slots, one cache line each
  std::string problem_;
};

}  // namespace ringtrain::comm::shm
