// stop_signals.hpp — SIGTERM, SIGUSR1 and SIGINT turned into a flag the trainer polls.
//
// No thread of ringtrain ever runs a signal handler. A handler that interrupts a oneDNN
// kernel on the main thread corrupted its heap (a SIGUSR1 every 20 ms crashed a 2-rank
// run within 100 signals; the same signals to the loader or fusion threads never did). So
// StopSignals blocks the three signals in the thread that constructs it, every thread
// started later inherits that mask (MPI's, OpenMP's, the loader's, the fusion engine's),
// and one thread of its own takes them synchronously with sigwait(). The first signal
// sets the flag that stop_signal() reads: the trainer finishes its step, writes a
// checkpoint and exits cleanly. A second signal, or one after the watcher is gone,
// terminates the process the default way, so a run that never reaches a step boundary
// can still be killed.
#pragma once

#include <pthread.h>

namespace ringtrain {

class StopSignals {
 public:
  // Construct first in main(), before MPI_Init or any OpenMP region starts a thread.
  StopSignals();
  // Stops the watcher and unblocks the signals in this thread.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first of SIGTERM, SIGUSR1, SIGINT received since start-up, or 0.
  static int stop_signal();

 private:
  pthread_t watcher_{};
};

}  // namespace ringtrain
