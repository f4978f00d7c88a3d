// stall_inspector.hpp — the fusion engine's watchdog: when a step makes no progress for the
// stall timeout, every rank reports the missing tensors and ranks, and the job aborts.
//
// A watchdog thread sleeps on a condition variable with a deadline. While a step is open
// (armed: first enqueue until synchronize returns), any progress (an enqueue, a bucket
// reduced) moves the deadline; if none comes for the timeout, the ranks exchange their ready
// bitmaps on a private communicator with a bounded wait, every rank that answers prints one
// line naming the missing tensors and the ranks missing them, and the job aborts (MPI_Abort,
// exit 1). Private to comm/fusion/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/comm/fusion/plan.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::fusion {

// One rank's view of the step when the inspector fires.
struct StallState {
  int64_t step = 0;
  int64_t next_bucket = 0;      // the oldest bucket not yet reduced
  bool in_synchronize = false;  // the main thread called synchronize()
  std::vector<uint8_t> ready;   // per gradient: enqueued this step
};

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective over comm (duplicates it). specs and buckets are the engine's plan and must
  // outlive the inspector. snapshot returns this rank's state; it is called on the watchdog
  // thread, without the inspector's lock held, only when the inspector fires.
  StallInspector(MPI_Comm comm, double timeout_s, const std::vector<GradSpec>& specs,
                 const std::vector<BucketLayout>& buckets, std::function<StallState()> snapshot);
  ~StallInspector();  // stops and joins the watchdog; never throws
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  // Progress at `now` moves the deadline; `arm` also opens the step (the watchdog counts).
  void note_progress(bool arm, Clock::time_point now);
  // The step is over: the watchdog sleeps until the next one opens.
  void disarm();

  // The one line every rank prints: which bucket, which tensors, which ranks, and why.
  // states[r] is rank r's state when answered[r]; window_s is how long ranks were waited for.
  std::string describe(const std::vector<StallState>& states, const std::vector<bool>& answered,
                       double window_s) const;

 private:
  void watch();
  [[noreturn]] void exchange_report_and_abort(const StallState& mine);

  CommHandle comm_;
  int rank_ = 0;
  int world_ = 1;
  double timeout_s_;
  const std::vector<GradSpec>& specs_;
  const std::vector<BucketLayout>& buckets_;
  std::function<StallState()> snapshot_;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stop_ = false;
  Clock::time_point last_progress_;
  std::thread thread_;
};

}  // namespace ringtrain::comm::fusion
