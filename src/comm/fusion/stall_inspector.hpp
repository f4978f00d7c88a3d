// stall_inspector.hpp — the fusion engine's watchdog: when a step makes no progress for the
// stall timeout, every rank reports the missing tensors and ranks, and the job aborts.
//
// A watchdog thread sleeps on a condition variable with a deadline. While a step is open
// (armed: first enqueue until synchronize returns), any progress (an enqueue, a bucket
// reduced) moves the deadline; if none comes for the timeout, the ranks exchange their ready
// bitmaps on a private communicator with a bounded wait, every rank that answers prints one
// line naming the missing tensors and the ranks missing them, and the job aborts (MPI_Abort,
// exit 1). When every rank has every gradient of the bucket and still no byte has moved for
// the timeout (a lost message, a protocol mismatch, a bug in a ring), that is a stall too: the
// line then says, for every rank, what its algorithm waits for (Allreducer::on_stall: the
// peer, the phase, the messages received and sent). Private to comm/fusion/.
//
// It is the job's one watchdog: through comm::StallWatch (stall_watch.hpp) the trainer names
// its phases and the Communicator's collectives (the stop check, metric reductions,
// evaluation, BN averages, checkpoint and results barriers and gathers) arm the same deadline;
// a stall there is reported by phase and step for every rank that answers.
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
#include "ringtrain/comm/stall_watch.hpp"

namespace ringtrain::comm::fusion {

// One rank's view of the step when the inspector fires.
struct StallState {
  std::string phase;  // empty: in the engine's step; else the collective's phase (set_phase)
  int64_t phase_step = 0;
  bool phase_io = false;  // the phase waits for one rank's file I/O (a longer deadline)
  int64_t step = 0;
  int64_t next_bucket = 0;      // the oldest bucket not yet reduced
  bool in_synchronize = false;  // the main thread called synchronize()
  std::vector<uint8_t> ready;   // per gradient: enqueued this step
  std::string detail;           // what this rank's reduction waited for (Allreducer::on_stall)
};

class StallInspector final : public StallWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective over comm (duplicates it). specs and buckets are the engine's plan and must
  // outlive the inspector. snapshot returns this rank's state; it is called on the watchdog
  // thread, without the inspector's lock held, only when the inspector fires. progress
  // (optional) counts what the engine's reduction has moved (Allreducer::progress): while an
  // engine step is open the watchdog looks at it every eighth of the timeout (the only wake-ups
  // besides the deadline), and a count that moved since the last look moves the deadline, so
  // only a reduction that moves no byte for the timeout is a stall. It is called on the
  // watchdog thread with the inspector's lock held, and must be cheap.
  StallInspector(MPI_Comm comm, double timeout_s, const std::vector<GradSpec>& specs,
                 const std::vector<BucketLayout>& buckets, std::function<StallState()> snapshot,
                 std::function<uint64_t()> progress = {});
  ~StallInspector();  // stops and joins the watchdog; never throws
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  // Progress at `now` moves the deadline; `arm` also opens the step (the watchdog counts).
  void note_progress(bool arm, Clock::time_point now);
  // The step is over: the watchdog sleeps until the next one opens.
  void disarm();

  // StallWatch: collectives outside the engine.
  void set_phase(const std::string& phase, int64_t step, bool io) override;
  void enter_collective() override;
  void leave_collective() override;

  // The one line every rank prints: which bucket, which tensors, which ranks, and why.
  // states[r] is rank r's state when answered[r]; window_s is how long ranks were waited for.
  std::string describe(const std::vector<StallState>& states, const std::vector<bool>& answered,
                       double window_s) const;

  // The same line when some rank waits in a collective outside the engine: where each rank
  // that answered was, and which did not answer.
  std::string describe_phases(const std::vector<StallState>& states,
                              const std::vector<bool>& answered, double window_s) const;

 private:
  void watch();
  bool bytes_moved();
  [[noreturn]] void exchange_report_and_abort(const StallState& mine);

  CommHandle comm_;
  int rank_ = 0;
  int world_ = 1;
  double timeout_s_;
  double io_factor_;  // io_phase_timeout_factor()
  const std::vector<GradSpec>& specs_;
  const std::vector<BucketLayout>& buckets_;
  std::function<StallState()> snapshot_;
  std::function<uint64_t()> progress_;
  uint64_t last_seen_progress_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;   // the engine's step is open
  int collectives_ = 0;  // collectives outside the engine this rank is inside
  std::string phase_;
  int64_t phase_step_ = 0;
  bool phase_io_ = false;
  bool stop_ = false;
  Clock::time_point last_progress_;
  std::thread thread_;
};

}  // namespace ringtrain::comm::fusion
