// device_wait.cpp — the poll loop behind every NCCL wait (done, failed, stalled or timed out),
// and the order of a collective that may launch late.
#include "ringtrain/comm/allreduce/device_wait.hpp"

#include <chrono>
#include <thread>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {

double DeviceWaitOps::monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Yield for the first polls (a small bucket finishes in microseconds), then sleep briefly: a
// long wait must not take a core from the compute threads of this rank.
void DeviceWaitOps::pause_between_polls() {
  thread_local unsigned polls = 0;
  if (++polls % 1024 != 0)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

void wait_for_device(const std::string& what, double timeout_s, const DeviceWaitOps& ops) {
  const double start = ops.now();
  auto abort_and_throw = [&](const std::string& why) {
    ops.abort();
    throw Error(str(what, ": ", why));
  };
  while (true) {
    const std::string reason = ops.async_error();
    if (!reason.empty()) abort_and_throw(str("NCCL reports ", reason, "; communicator aborted"));
    if (ops.finished()) return;
    if (ops.stalled())
      abort_and_throw(
          "not finished when the stall watchdog fired, and NCCL reports no error; communicator "
          "aborted");
    if (timeout_s > 0 && ops.now() - start >= timeout_s)
      abort_and_throw(str("not finished after ", timeout_s,
                          " s, and NCCL reports no error (a peer stopped, or the network hangs); "
                          "communicator aborted (comm.stall_timeout_s sets the limit)"));
    ops.pause();
  }
}

void queue_in_order(const std::string& what, double timeout_s, const OrderedCollective& steps,
                    const DeviceWaitOps& launched) {
  if (steps.before) steps.before();
  if (!steps.collective()) wait_for_device(str(what, " (its launch)"), timeout_s, launched);
  if (steps.after) steps.after();
}

}  // namespace ringtrain::comm::allreduce
