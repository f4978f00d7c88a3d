// device_wait.hpp — waiting for work queued on a device without ever hanging: poll until it is
// done, and on the library's asynchronous error, at a deadline or when the stall watchdog gives
// up, abort the communicator once and throw an error that says why.
//
// Host code with no CUDA or NCCL type in it: the NCCL allreducer supplies the real queries
// (cudaStreamQuery, ncclCommGetAsyncError, ncclCommAbort), the tests supply fakes, so the
// logic that keeps a GPU job from hanging runs and is tested on machines without a GPU.
#pragma once

#include <functional>
#include <string>

namespace ringtrain::comm::allreduce {

struct DeviceWaitOps {
  // True once the queued work has finished. Throws when the query itself fails.
  std::function<bool()> finished;
  // "" while the communicator is healthy, else the library's reason (NCCL's error string
  // and its last error text).
  std::function<std::string()> async_error;
  // Aborts the communicator (ncclCommAbort): what was queued will never finish. Called at most
  // once per wait, and only on the way to an error.
  std::function<void()> abort;
  // True once the job's stall watchdog has given up on this wait (Allreducer::on_stall).
  std::function<bool()> stalled = [] { return false; };
  // Seconds on a monotonic clock, and what to do between two polls (a short sleep).
  std::function<double()> now = monotonic_seconds;
  std::function<void()> pause = pause_between_polls;

  static double monotonic_seconds();
  static void pause_between_polls();
};

// Polls until ops.finished(). Throws ringtrain::Error after one call of ops.abort() when
//   ops.async_error() is not empty:  "<what>: NCCL reports <reason>; communicator aborted"
//   ops.stalled():                   "<what>: not finished when the stall watchdog fired, and
//                                     NCCL reports no error; communicator aborted"
//   timeout_s > 0 have passed:       "<what>: not finished after <T> s, and NCCL reports no
//                                     error (a peer stopped, or the network hangs); communicator
//                                     aborted (comm.stall_timeout_s sets the limit)"
// `what` names the operation, the rank and the host.
void wait_for_device(const std::string& what, double timeout_s, const DeviceWaitOps& ops);

// A collective on a non-blocking communicator (NCCL with config.blocking = 0) may answer "in
// progress": NCCL then puts it on its stream later, from its own thread, and whatever this
// thread queues on that stream meanwhile runs first (the unpack and divide kernels would read
// the buffer before the sum). So the steps run in this order: before() queued, the collective
// queued, a wait until the library has launched it (when it answered "in progress"), after()
// queued.
struct OrderedCollective {
  std::function<void()> before;      // queued ahead of the collective (pre-divide, pack)
  std::function<bool()> collective;  // queues it: true when launched, false when "in progress"
  std::function<void()> after;       // queued behind it (unpack, divide)
};

// Runs `steps` in that order; `launched` says when an "in progress" collective has left that
// state (its `finished`), with wait_for_device's errors, stall and timeout. after() is never
// queued when the launch failed.
void queue_in_order(const std::string& what, double timeout_s, const OrderedCollective& steps,
                    const DeviceWaitOps& launched);

}  // namespace ringtrain::comm::allreduce
