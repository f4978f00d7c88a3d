// local_gate.cpp — the node's shared ticket slots (a SharedSegment) and the futex wait on them.
#include "ringtrain/comm/shm/local_gate.hpp"

#include <new>

#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/comm/shm/futex.hpp"
#include "ringtrain/comm/shm/shared_segment.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::shm {
namespace {

constexpr size_t kSlotBytes = 64;  // one cache line per rank: no false sharing between slots

}  // namespace

LocalGate::LocalGate(MPI_Comm comm) {
#if defined(__linux__)
  CommHandle node = split_shared_memory(comm);
  MPI_CHECK(MPI_Comm_rank(node.get(), &local_rank_));
  MPI_CHECK(MPI_Comm_size(node.get(), &local_size_));
  if (local_size_ == 1) return;
  segment_ = std::make_unique<SharedSegment>(node.get(), size_t(local_size_) * kSlotBytes, "gate");
  if (!segment_->data()) {
    problem_ = "local gate: " + segment_->problem();
    segment_.reset();
    return;
  }
  for (int r = 0; r < local_size_; ++r)
    new (static_cast<char*>(segment_->data()) + size_t(r) * kSlotBytes) std::atomic<uint32_t>(0);
  // Nobody may publish a ticket before every rank has constructed the slots.
  MPI_CHECK(MPI_Barrier(node.get()));
#else
  (void)comm;
  problem_ = "local gate: futexes are Linux only";
#endif
}

LocalGate::~LocalGate() = default;

std::atomic<uint32_t>& LocalGate::slot(int local_rank) const {
  return *std::launder(reinterpret_cast<std::atomic<uint32_t>*>(
      static_cast<char*>(segment_->data()) + size_t(local_rank) * kSlotBytes));
}

void LocalGate::arrive_and_wait(uint32_t ticket) {
  if (!segment_) return;
#if defined(__linux__)
  publish_and_wake(slot(local_rank_), ticket);
  for (int r = 0; r < local_size_; ++r)
    if (r != local_rank_) wait_until_reached(slot(r), ticket, nullptr, WaitStyle::sleep);
#endif
}

}  // namespace ringtrain::comm::shm
