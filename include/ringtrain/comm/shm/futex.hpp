// futex.hpp — sleeping waits on a 32-bit word in memory shared by the ranks of one node.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#include "ringtrain/comm/shm/wait_style.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ringtrain::comm::shm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex word must be a plain, lock-free 32-bit atomic");

// True when `have` is at or past `want`, counting modulo 2^32 (sequence numbers may wrap).
inline bool reached(uint32_t have, uint32_t want) {
  return static_cast<int32_t>(have - want) >= 0;
}

#if defined(__linux__)
// Shared (not FUTEX_PRIVATE) operations: the word lives in memory mapped by several processes.
// Returns at once when the word no longer holds `expected`, so a wake-up between the caller's
// load and this call is never lost.
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
inline void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Loads of the word before a waiter goes to sleep: a few microseconds. A peer that is that close
// behind is met without a sleep, whose wake-up costs tens of microseconds (docs/TUNING.md,
// "Futex spins"). No PAUSE in the loop: under a hypervisor a PAUSE loop can trap to the host
// (pause-loop exiting).
constexpr int kSpinsBeforeSleep = 4096;
// While the caller says its core has nothing else to run (spin_hint), a wait spins this much
// longer (about a millisecond) before it sleeps: a sleeping vCPU halts, and waking a halted
// one can cost more than a small bucket's whole reduction (docs/TUNING.md, "Futex spins").
constexpr int kSpinsWhileIdle = 1 << 20;

// Yields before a waiter sleeps (after its spin, for WaitStyle::spin): a yield with a peer
// runnable on this CPU lets it run, and the wait ends without a sleep and a wake-up; with nothing
// else runnable, 64 of them are a few tens of microseconds. A spinning waiter yields too before
// it sleeps: with other jobs on the machine two ranks can share a CPU even where the node has one
// for each (docs/TUNING.md, "Waits when ranks outnumber CPUs").
constexpr int kYieldsBeforeSleep = 64;

// Sleeps until `word` reaches `want` (modulo 2^32): for WaitStyle::spin after a short spin (a
// long one while *spin_hint is true), then kYieldsBeforeSleep yields; for WaitStyle::yield after
// the yields alone; for WaitStyle::sleep after the short spin alone. Returns the value seen.
inline uint32_t wait_until_reached(std::atomic<uint32_t>& word, uint32_t want,
                                   const std::atomic<bool>* spin_hint = nullptr,
                                   WaitStyle style = WaitStyle::spin) {
  uint32_t seen = word.load(std::memory_order_acquire);
  if (style != WaitStyle::yield) {
    const int spins = spin_hint && spin_hint->load(std::memory_order_relaxed) ? kSpinsWhileIdle
                                                                              : kSpinsBeforeSleep;
    for (int spin = 0; spin < spins && !reached(seen, want); ++spin)
      seen = word.load(std::memory_order_acquire);
  }
  for (int yields = 0;
       style != WaitStyle::sleep && yields < kYieldsBeforeSleep && !reached(seen, want); ++yields) {
    sched_yield();
    seen = word.load(std::memory_order_acquire);
  }
  while (!reached(seen, want)) {
    futex_wait(word, seen);
    seen = word.load(std::memory_order_acquire);
  }
  return seen;
}

// Publishes `value` (release: what was written before is visible to whoever sees it) and wakes
// every sleeper on the word.
inline void publish_and_wake(std::atomic<uint32_t>& word, uint32_t value) {
  word.store(value, std::memory_order_release);
  futex_wake_all(word);
}
#endif

}  // namespace ringtrain::comm::shm
