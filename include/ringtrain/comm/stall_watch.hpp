// stall_watch.hpp — what the job's one stall watchdog (the fusion engine's stall inspector) is
// told by the code that blocks in collectives outside the engine: the phase a rank is in,
// and when a blocking collective begins and ends.
//
// While a rank is inside a collective the watchdog's deadline runs; past comm.stall_timeout_s
// every rank that waits reports where each rank was and the job ends (see
// src/comm/fusion/stall_inspector.hpp). A rank that writes a file while the others wait for
// it (a checkpoint, the results) puts the others in an I/O phase, which waits
// io_phase_timeout_factor() times as long before it counts as a stall.
#pragma once

#include <cstdint>
#include <string>

namespace ringtrain::comm {

// How many stall timeouts an I/O phase waits: 10, so a slow file system is no stall. The
// stall tests set RINGTRAIN_STALL_IO_FACTOR (a number, 1 to 1000) lower: they stop a rank in an
// I/O phase on purpose, and 10 timeouts would be most of their run time. Read once; an
// InputError naming the variable when it is set to anything else.
double io_phase_timeout_factor();

class StallWatch {
 public:
  // What this rank does next, for the report ("the stop check", "evaluation"), at step.
  // io: the collectives of this phase wait for one rank's file I/O.
  virtual void set_phase(const std::string& phase, int64_t step, bool io = false) = 0;
  virtual void enter_collective() = 0;  // the deadline runs from now
  virtual void leave_collective() = 0;

 protected:
  ~StallWatch() = default;
};

// Enters a collective for its lifetime; a null watch watches nothing.
class WatchedCollective {
 public:
  explicit WatchedCollective(StallWatch* watch) : watch_(watch) {
    if (watch_) watch_->enter_collective();
  }
  ~WatchedCollective() {
    if (watch_) watch_->leave_collective();
  }
  WatchedCollective(const WatchedCollective&) = delete;
  WatchedCollective& operator=(const WatchedCollective&) = delete;

 private:
  StallWatch* watch_;
};

}  // namespace ringtrain::comm
