// stall_inspector.cpp — the watchdog thread, the exchange of ready bitmaps with a bounded
// wait, the stall report line and the abort.
#include "stall_inspector.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "names.hpp"
#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::fusion {
namespace {

constexpr int kTagStallState = 7201;
constexpr int kTagStallPrinted = 7202;
constexpr size_t kPhaseBytes = 48;    // a phase's name on the wire, cut to fit
constexpr size_t kDetailBytes = 256;  // what a rank's reduction waits for, cut to fit
constexpr size_t kHeaderBytes = 5 * sizeof(int64_t) + kPhaseBytes + kDetailBytes;

// A state on the wire: step, next bucket, in_synchronize, phase step, phase io, phase name,
// the reduction's detail, then one byte per gradient.
std::vector<uint8_t> encode(const StallState& state) {
  std::vector<uint8_t> record(kHeaderBytes + state.ready.size(), 0);
  const int64_t header[5] = {state.step, state.next_bucket, state.in_synchronize ? 1 : 0,
                             state.phase_step, state.phase_io ? 1 : 0};
  std::memcpy(record.data(), header, sizeof header);
  std::memcpy(record.data() + sizeof header, state.phase.data(),
              std::min(state.phase.size(), kPhaseBytes - 1));
  std::memcpy(record.data() + sizeof header + kPhaseBytes, state.detail.data(),
              std::min(state.detail.size(), kDetailBytes - 1));
  std::copy(state.ready.begin(), state.ready.end(), record.begin() + kHeaderBytes);
  return record;
}

StallState decode(const std::vector<uint8_t>& record) {
  StallState state;
  int64_t header[5];
  std::memcpy(header, record.data(), sizeof header);
  state.step = header[0];
  state.next_bucket = header[1];
  state.in_synchronize = header[2] != 0;
  state.phase_step = header[3];
  state.phase_io = header[4] != 0;
  const char* phase = reinterpret_cast<const char*>(record.data() + sizeof header);
  state.phase.assign(phase, strnlen(phase, kPhaseBytes - 1));
  const char* detail = phase + kPhaseBytes;
  state.detail.assign(detail, strnlen(detail, kDetailBytes - 1));
  state.ready.assign(record.begin() + kHeaderBytes, record.end());
  return state;
}

// Waits until every request completes or the deadline passes; true for each one that
// completed. Polls, but only on the failure path.
std::vector<bool> wait_bounded(std::vector<MPI_Request>& requests, double deadline_s) {
  std::vector<bool> done(requests.size(), false);
  while (true) {
    bool all = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      if (requests[i] == MPI_REQUEST_NULL) {
        done[i] = true;
        continue;
      }
      int flag = 0;
      if (MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        requests[i] = MPI_REQUEST_NULL;  // a rank that already left: count it as silent
        continue;
      }
      if (flag) done[i] = true;
      all = all && done[i];
    }
    if (all || Timeline::now() >= deadline_s) return done;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

}  // namespace ringtrain::comm::fusion

namespace ringtrain::comm {

double io_phase_timeout_factor() {
  static const double factor = [] {
    const char* env = std::getenv("RINGTRAIN_STALL_IO_FACTOR");
    if (!env || !*env) return 10.0;
    char* end = nullptr;
    const double value = std::strtod(env, &end);
    RT_REQUIRE_INPUT(*end == '\0' && value >= 1 && value <= 1000,
                     "RINGTRAIN_STALL_IO_FACTOR = ", env, ": use a number from 1 to 1000");
    return value;
  }();
  return factor;
}

}  // namespace ringtrain::comm

namespace ringtrain::comm::fusion {

StallInspector::StallInspector(MPI_Comm comm, double timeout_s, const std::vector<GradSpec>& specs,
                               const std::vector<BucketLayout>& buckets,
                               std::function<StallState()> snapshot,
                               std::function<uint64_t()> progress)
    // MPI_ERRORS_RETURN: a peer that already left must not turn the report into an abort.
    : comm_(duplicate(comm)),
      timeout_s_(timeout_s),
      io_factor_(io_phase_timeout_factor()),  // here: a bad value throws before the thread starts
      specs_(specs),
      buckets_(buckets),
      snapshot_(std::move(snapshot)),
      progress_(std::move(progress)) {
  MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_));
  MPI_CHECK(MPI_Comm_size(comm_.get(), &world_));
  thread_ = std::thread([this] { watch(); });
  pthread_setname_np(thread_.native_handle(), "rt-stall");
}

StallInspector::~StallInspector() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallInspector::note_progress(bool arm, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_progress_ = now;
  // The deadline counts from here: so does the count of what the reduction moved.
  if (progress_) last_seen_progress_ = progress_();
  if (arm && !armed_) {
    armed_ = true;
    cv_.notify_one();  // once per step: the watchdog now counts from last_progress_
  }
}

void StallInspector::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;  // no wake-up: the watchdog sees it at its deadline and sleeps again
}

void StallInspector::set_phase(const std::string& phase, int64_t step, bool io) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = phase;
  phase_step_ = step;
  phase_io_ = io;
}

void StallInspector::enter_collective() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (collectives_++ == 0) {
    last_progress_ = Clock::now();
    cv_.notify_one();
  }
}

void StallInspector::leave_collective() {
  std::lock_guard<std::mutex> lock(mutex_);
  --collectives_;  // no wake-up, as in disarm()
}

void StallInspector::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_ && collectives_ == 0) {
      cv_.wait(lock);
      continue;
    }
    const double factor = collectives_ > 0 && phase_io_ ? io_factor_ : 1.0;
    const auto timeout = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(timeout_s_ * factor));
    const auto now = Clock::now();
    // A reduction that moves is no stall; looked at every eighth of the timeout, so a stall is
    // reported at most that late after the last byte moved.
    if (bytes_moved()) last_progress_ = now;
    const auto deadline = last_progress_ + timeout;
    if (now >= deadline) {
      const bool in_collective = collectives_ > 0;
      const std::string phase = phase_;
      const int64_t phase_step = phase_step_;
      const bool phase_io = phase_io_;
      lock.unlock();  // the snapshot takes the engine's lock, which calls us under it
      StallState mine = snapshot_();
      if (in_collective) {
        mine.phase = phase;
        mine.phase_step = phase_step;
        mine.phase_io = phase_io;
      }
      exchange_report_and_abort(mine);
    }
    const bool poll = progress_ && armed_ && collectives_ == 0;
    cv_.wait_until(lock, poll ? std::min(deadline, now + timeout / 8) : deadline);
  }
}

// Called with the lock held: did the engine's reduction complete any message (or stage) since
// the last look? Only the engine's step has such a sign; a collective outside it has none.
bool StallInspector::bytes_moved() {
  if (!armed_ || collectives_ > 0 || !progress_) return false;
  const uint64_t now = progress_();
  const bool moved = now != last_seen_progress_;
  last_seen_progress_ = now;
  return moved;
}

std::string StallInspector::describe_phases(const std::vector<StallState>& state,
                                            const std::vector<bool>& answered,
                                            double window_s) const {
  // Ranks grouped by where they were, in rank order of each group's first rank.
  std::vector<std::pair<std::string, std::vector<int>>> places;
  std::vector<int> silent;
  double waited_s = timeout_s_;
  for (size_t r = 0; r < state.size(); ++r) {
    if (!answered[r]) {
      silent.push_back(int(r));
      continue;
    }
    const StallState& s = state[r];
    if (s.phase_io) waited_s = timeout_s_ * io_factor_;
    std::string where = s.phase.empty() ? str("the gradient allreduce of step ", s.step,
                                              " (bucket ", s.next_bucket, ")")
                                        : str(s.phase, " at step ", s.phase_step);
    auto place =
        std::find_if(places.begin(), places.end(), [&](const auto& p) { return p.first == where; });
    if (place == places.end()) place = places.insert(places.end(), {where, {}});
    place->second.push_back(int(r));
  }
  std::string line = str("stall: after ", number_text(waited_s), " s, ");
  for (size_t k = 0; k < places.size(); ++k)
    line += str(k ? "; " : "", rank_list(places[k].second),
                places[k].second.size() > 1 ? " wait in " : " waits in ", places[k].first);
  if (!silent.empty())
    line += str("; ", rank_list(silent), " did not answer within ", number_text(window_s),
                " s (stopped, or stuck outside a collective, e.g. in compute or I/O, or exited)");
  return line;
}

std::string StallInspector::describe(const std::vector<StallState>& state,
                                     const std::vector<bool>& answered, double window_s) const {
  for (size_t r = 0; r < state.size(); ++r)
    if (answered[r] && !state[r].phase.empty()) return describe_phases(state, answered, window_s);
  std::vector<int> silent;
  int64_t step = INT64_MAX;
  for (size_t r = 0; r < state.size(); ++r) {
    if (!answered[r]) {
      silent.push_back(int(r));
      continue;
    }
    step = std::min(step, state[r].step);
  }
  // The oldest unreduced bucket of the oldest step; a rank already past that step has it all.
  int64_t bucket = int64_t(buckets_.size());
  for (size_t r = 0; r < state.size(); ++r)
    if (answered[r] && state[r].step == step) bucket = std::min(bucket, state[r].next_bucket);
  bucket = std::min<int64_t>(bucket, int64_t(buckets_.size()) - 1);
  std::string line =
      str("stall: after ", number_text(timeout_s_), " s, bucket ", bucket, " of step ", step);
  std::string silent_text =
      silent.empty() ? std::string()
                     : str(rank_list(silent), " did not answer within ", number_text(window_s),
                           " s: stuck outside the engine (e.g. in compute or I/O) or exited");

  // Missing tensors of that bucket, grouped by the set of ranks that lack them.
  std::vector<std::pair<std::vector<int>, std::vector<std::string>>> groups;
  std::vector<int> stopped, in_synchronize;
  std::vector<bool> lacks(state.size(), false);
  size_t total_missing = 0;
  if (bucket >= 0) {
    const BucketLayout& layout = buckets_[size_t(bucket)];
    for (size_t i = layout.first_tensor; i < layout.first_tensor + layout.tensor_count; ++i) {
      std::vector<int> ranks;
      for (size_t r = 0; r < state.size(); ++r)
        if (answered[r] && state[r].step == step && !state[r].ready[i]) ranks.push_back(int(r));
      if (ranks.empty()) continue;
      for (int r : ranks) lacks[size_t(r)] = true;
      if (++total_missing > kMaxNamesListed) continue;
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == ranks; });
      if (group == groups.end()) group = groups.insert(groups.end(), {ranks, {}});
      group->second.push_back(spec_text(specs_[i]));
    }
  }
  for (size_t r = 0; r < state.size(); ++r)
    if (lacks[r]) (state[r].in_synchronize ? in_synchronize : stopped).push_back(int(r));

  if (total_missing == 0 && silent.empty()) {
    line +=
        " has every gradient on every rank, but its allreduce made no progress (a lost message, "
        "a protocol mismatch, or a rank stuck inside the reduction)";
    for (size_t r = 0; r < state.size(); ++r)
      if (!state[r].detail.empty())
        line += str(r ? "; rank " : ": rank ", r, ": ", state[r].detail);
    return line;
  }
  const std::string& own = state[size_t(rank_)].detail;
  const std::string own_text = own.empty() ? std::string() : "; " + own;
  if (total_missing == 0)
    return line + " still waits for " + rank_list(silent) + ", which did not answer within " +
           number_text(window_s) +
           " s (stuck outside the engine, e.g. in compute or I/O, or exited)" + own_text;
  line += " still waits for ";
  for (size_t g = 0; g < groups.size(); ++g) {
    line += g ? "; " : "";
    for (size_t k = 0; k < groups[g].second.size(); ++k)
      line += (k ? ", " : "") + groups[g].second[k];
    line += " on " + rank_list(groups[g].first);
  }
  if (total_missing > kMaxNamesListed)
    line += str(" (and ", total_missing - kMaxNamesListed, " more)");
  std::vector<std::string> causes;
  if (!stopped.empty()) causes.push_back(rank_list(stopped) + " stopped enqueuing");
  if (!in_synchronize.empty())
    causes.push_back(rank_list(in_synchronize) + " called synchronize() without them");
  if (!silent.empty()) causes.push_back(silent_text);
  line += " (";
  for (size_t k = 0; k < causes.size(); ++k) line += (k ? "; " : "") + causes[k];
  return line + ")" + own_text;
}

// Every rank whose watchdog fires sends its state to every other rank; each waits a bounded
// time for the others, prints one line, waits (bounded) until the others printed too, then
// aborts the job.
void StallInspector::exchange_report_and_abort(const StallState& mine) {
  const double window_s = std::clamp(timeout_s_, 1.0, 5.0);
  const size_t n = size_t(world_), me = size_t(rank_);
  const std::vector<uint8_t> record = encode(mine);
  std::vector<std::vector<uint8_t>> records(n, std::vector<uint8_t>(record.size()));
  records[me] = record;
  std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
  for (size_t r = 0; r < n; ++r) {
    if (r == me) continue;
    MPI_Irecv(records[r].data(), int(record.size()), MPI_BYTE, int(r), kTagStallState, comm_.get(),
              &receives[r]);
    MPI_Isend(record.data(), int(record.size()), MPI_BYTE, int(r), kTagStallState, comm_.get(),
              &sends[r]);
  }
  std::vector<bool> answered = wait_bounded(receives, Timeline::now() + window_s);
  std::vector<StallState> states(n);
  for (size_t r = 0; r < n; ++r)
    if (answered[r]) states[r] = decode(records[r]);

  const std::string line = describe(states, answered, window_s);
  std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", rank_, line.c_str());
  std::fflush(stderr);

  // The first MPI_Abort kills the whole job: give every rank that answered the time to print.
  std::vector<uint8_t> printed(n, 0);
  uint8_t yes = 1;
  std::vector<MPI_Request> acks(n, MPI_REQUEST_NULL), notes(n, MPI_REQUEST_NULL);
  for (size_t r = 0; r < n; ++r) {
    if (r == me || !answered[r]) continue;
    MPI_Irecv(&printed[r], 1, MPI_BYTE, int(r), kTagStallPrinted, comm_.get(), &acks[r]);
    MPI_Isend(&yes, 1, MPI_BYTE, int(r), kTagStallPrinted, comm_.get(), &notes[r]);
  }
  wait_bounded(acks, Timeline::now() + window_s);
  abort_job(comm_.get(), kExitFailure);
}

}  // namespace ringtrain::comm::fusion
