// shm_ring.hpp — ShmRing: the ring allreduce's messages through node shared memory, waited for
// asleep (futex) instead of polled for inside MPI.
//
// Why: OpenMPI waits by polling. With mpi_yield_when_idle the poll calls sched_yield, so a
// comm thread whose neighbour's data is not there yet keeps coming back to the core that
// backprop runs on, and most of its CPU goes to the scheduler, not the adds. Here a rank that
// must wait for its neighbour spins a few microseconds, then sleeps in the kernel until the
// neighbour's store wakes it (futex.hpp). The profile and the gain: docs/TUNING.md.
//
// Layout: one SharedSegment; per rank an inbox of a header and K slots. The header holds two
// counters, each on its own cache line: `published`, how many messages the left neighbour has
// written into this inbox, and `consumed`, how many of them this rank has taken out. Message m
// (counted over the ShmRing's life) goes into slot m % K:
//
//   sender (left neighbour)                      receiver (this rank)
//   wait until consumed >= m + 1 - K              wait until published >= m + 1
//   write the slot; published = m + 1, wake       read the slot; consumed = m + 1, wake
//
// Every wait is on a counter the other side only ever raises, so no wake-up can be lost.
// Deadlock-free for any K >= 1 when each rank alternates send m, receive m: a rank blocked
// sending m has a right neighbour still short of receiving m - K, and around the ring that
// would need m > m.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm
#include "ringtrain/comm/shm/wait_style.hpp"

namespace ringtrain::comm::shm {

class SharedSegment;

class ShmRing {
 public:
  // Collective over comm. Null, with `why_not` set, unless every rank of comm shares this
  // node's memory and the segment maps on all of them (the same answer on every rank).
  // right: the comm rank this rank sends to. K = slots per inbox, each slot_bytes long; K is a
  // power of two, so slot m % K stays right where the message count wraps at 2^32.
  // first_message: where the count starts (the same on every rank; tests start it near 2^32).
  static std::unique_ptr<ShmRing> try_make(MPI_Comm comm, int right, int slots, size_t slot_bytes,
                                           std::string& why_not, uint32_t first_message = 0);
  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  WaitStyle wait_style() const { return wait_style_; }
  // While *hint is true, this process's core has nothing else to run, so waits spin longer
  // before they sleep (futex.hpp). Null: the short spin only. Set before the ring is used.
  void set_spin_hint(const std::atomic<bool>* hint) { spin_hint_ = hint; }
  // Sleeps until the right neighbour has a free slot for the next message and returns it.
  void* claim_send_slot();
  // Publishes the claimed slot to the right neighbour.
  void send_claimed();
  // Sleeps until the left neighbour's next message is in and returns it (read only).
  const void* wait_message();
  // Hands the message's slot back to the left neighbour.
  void release_message();

 private:
  struct Inbox;
  ShmRing(std::unique_ptr<SharedSegment> segment, int rank, int right, int slots, size_t slot_bytes,
          uint32_t first_message, WaitStyle wait_style);
  Inbox inbox(int rank) const;

  std::unique_ptr<SharedSegment> segment_;
  int rank_ = 0, right_ = 0, slots_ = 1;
  size_t slot_bytes_ = 0, inbox_bytes_ = 0;
  uint32_t sent_ = 0, received_ = 0;  // messages so far, modulo 2^32
  const std::atomic<bool>* spin_hint_ = nullptr;
  WaitStyle wait_style_ = WaitStyle::spin;  // chosen at try_make (wait_style.hpp)
};

}  // namespace ringtrain::comm::shm
