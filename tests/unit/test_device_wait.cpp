// test_device_wait.cpp — the NCCL wait and set-up logic with fake queries (no GPU needed): work
// that never finishes ends at the timeout, an asynchronous error aborts once and is named, a
// stall gives up, finished work returns without an abort, and work behind a collective that
// launches late is queued only after its launch.
#include <boost/test/unit_test.hpp>
#include <functional>
#include <string>

#include "ringtrain/comm/allreduce/device_wait.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using comm::allreduce::DeviceWaitOps;

namespace {

// A device that finishes after `finish_after` polls (never when < 0), reports `error` from poll
// `error_after` on, and a clock that advances one second per poll.
struct FakeDevice {
  int finish_after = -1;
  int error_after = -1;
  std::string error;
  int stall_after = -1;
  int polls = 0;
  int aborts = 0;
  double clock = 100;

  DeviceWaitOps ops() {
    DeviceWaitOps o;
    o.finished = [this] { return finish_after >= 0 && polls >= finish_after; };
    o.async_error = [this] {
      return error_after >= 0 && polls >= error_after ? error : std::string();
    };
    o.abort = [this] { ++aborts; };
    o.stalled = [this] { return stall_after >= 0 && polls >= stall_after; };
    o.now = [this] { return clock; };
    o.pause = [this] {
      ++polls;
      clock += 1;
    };
    return o;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kWhat = "nccl allreduce of 1024 floats on rank 1 (host n1)";

}  // namespace

BOOST_AUTO_TEST_SUITE(device_wait)

BOOST_AUTO_TEST_CASE(work_that_finishes_returns_without_an_abort) {
  FakeDevice device;
  device.finish_after = 3;
  BOOST_TEST(error_of([&] { wait_for_device(kWhat, 60, device.ops()); }) == "(no error)");
  BOOST_TEST(device.polls == 3);
  BOOST_TEST(device.aborts == 0);
}

BOOST_AUTO_TEST_CASE(work_that_never_finishes_is_aborted_at_the_timeout) {
  FakeDevice device;
  const std::string message = error_of([&] { wait_for_device(kWhat, 5, device.ops()); });
  BOOST_TEST(message ==
             "nccl allreduce of 1024 floats on rank 1 (host n1): not finished after 5 s, and "
             "NCCL reports no error (a peer stopped, or the network hangs); communicator "
             "aborted (comm.stall_timeout_s sets the limit)");
  BOOST_TEST(device.polls == 5);
  BOOST_TEST(device.aborts == 1);
}

BOOST_AUTO_TEST_CASE(an_async_error_aborts_once_and_names_nccls_reason) {
  FakeDevice device;
  device.error_after = 2;
  device.error = "remote process exited or there was a network error (NET/IB: peer closed)";
  const std::string message = error_of([&] { wait_for_device(kWhat, 60, device.ops()); });
  BOOST_TEST(message ==
             "nccl allreduce of 1024 floats on rank 1 (host n1): NCCL reports remote process "
             "exited or there was a network error (NET/IB: peer closed); communicator aborted");
  BOOST_TEST(device.aborts == 1);
  BOOST_TEST(device.polls == 2);
}

// An error that arrives with the result still wins: the result of a failed communicator is not
// to be trusted.
BOOST_AUTO_TEST_CASE(an_async_error_wins_over_finished_work) {
  FakeDevice device;
  device.finish_after = 0;
  device.error_after = 0;
  device.error = "unhandled cuda error";
  BOOST_TEST(error_of([&] { wait_for_device(kWhat, 60, device.ops()); }) ==
             kWhat + ": NCCL reports unhandled cuda error; communicator aborted");
  BOOST_TEST(device.aborts == 1);
}

BOOST_AUTO_TEST_CASE(a_stall_gives_up_before_the_timeout) {
  FakeDevice device;
  device.stall_after = 4;
  BOOST_TEST(error_of([&] { wait_for_device(kWhat, 60, device.ops()); }) ==
             kWhat +
                 ": not finished when the stall watchdog fired, and NCCL reports no error; "
                 "communicator aborted");
  BOOST_TEST(device.aborts == 1);
  BOOST_TEST(device.polls == 4);
}

BOOST_AUTO_TEST_CASE(a_timeout_of_zero_waits_as_long_as_it_takes) {
  FakeDevice device;
  device.finish_after = 1000;
  BOOST_TEST(error_of([&] { wait_for_device(kWhat, 0, device.ops()); }) == "(no error)");
  BOOST_TEST(device.aborts == 0);
}

// A failing query (cudaStreamQuery returning an error) propagates as it is, and the wait does
// not abort on its own: the caller that owns the communicator decides.
BOOST_AUTO_TEST_CASE(a_failing_query_propagates) {
  FakeDevice device;
  DeviceWaitOps ops = device.ops();
  ops.finished = []() -> bool { throw Error("CUDA call cudaStreamQuery failed"); };
  BOOST_TEST(error_of([&] { wait_for_device(kWhat, 60, ops); }) ==
             "CUDA call cudaStreamQuery failed");
}

// A collective that answers "in progress" is launched later from NCCL's own thread: the unpack
// and divide kernels may be queued only once it has left that state. The fake stream records
// what is queued in order; the launch completes after 3 polls. Before (queued straight after
// the call): "before collective after" with no poll between, the unpack ahead of the sum.
BOOST_AUTO_TEST_CASE(work_behind_a_late_launch_is_queued_after_it) {
  FakeDevice device;
  device.finish_after = 3;
  std::string stream;
  comm::allreduce::OrderedCollective steps;
  steps.before = [&] { stream += "before "; };
  steps.collective = [&] {
    stream += "collective ";
    return false;  // ncclInProgress
  };
  steps.after = [&] { stream += str("after(polls ", device.polls, ")"); };
  BOOST_TEST(error_of([&] { queue_in_order(kWhat, 60, steps, device.ops()); }) == "(no error)");
  BOOST_TEST(stream == "before collective after(polls 3)");
  BOOST_TEST(device.aborts == 0);
}

BOOST_AUTO_TEST_CASE(a_collective_launched_at_once_is_not_waited_for) {
  FakeDevice device;  // would never finish: a wait would end at the timeout
  std::string stream;
  comm::allreduce::OrderedCollective steps;
  steps.collective = [&] {
    stream += "collective ";
    return true;  // ncclSuccess
  };
  steps.after = [&] { stream += "after"; };
  BOOST_TEST(error_of([&] { queue_in_order(kWhat, 5, steps, device.ops()); }) == "(no error)");
  BOOST_TEST(stream == "collective after");
  BOOST_TEST(device.polls == 0);
}

// A launch that fails leaves nothing queued behind it, and the error names the launch.
BOOST_AUTO_TEST_CASE(a_failed_launch_queues_nothing_behind_it) {
  FakeDevice device;
  device.error_after = 1;
  device.error = "invalid usage";
  bool after = false;
  comm::allreduce::OrderedCollective steps;
  steps.collective = [] { return false; };
  steps.after = [&] { after = true; };
  BOOST_TEST(error_of([&] { queue_in_order(kWhat, 60, steps, device.ops()); }) ==
             kWhat + " (its launch): NCCL reports invalid usage; communicator aborted");
  BOOST_TEST(!after);
  BOOST_TEST(device.aborts == 1);
}

BOOST_AUTO_TEST_SUITE_END()
