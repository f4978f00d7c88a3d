// autotune.cpp — the coordinate search over overlap and fusion size, and its trials across ranks.
#include "ringtrain/comm/fusion/autotune.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "names.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"  // median

namespace ringtrain::comm::fusion {
namespace {

std::string ms_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  return buf;
}

// The message rank 0 broadcasts after each trial: the settings of the next step on.
struct Decision {
  TuneSettings settings;
  bool trial_over = false;
  bool finished = false;
};

constexpr size_t kDecisionBytes = 3 + sizeof(double);

std::vector<uint8_t> pack(const Decision& d) {
  std::vector<uint8_t> bytes(kDecisionBytes);
  bytes[0] = d.settings.overlap;
  bytes[1] = d.trial_over;
  bytes[2] = d.finished;
  std::memcpy(bytes.data() + 3, &d.settings.fusion_mib, sizeof(double));
  return bytes;
}

Decision unpack(const std::vector<uint8_t>& bytes) {
  RT_CHECK(bytes.size() == kDecisionBytes, "autotune: a decision of ", bytes.size(), " bytes");
  Decision d;
  d.settings.overlap = bytes[0] != 0;
  d.trial_over = bytes[1] != 0;
  d.finished = bytes[2] != 0;
  std::memcpy(&d.settings.fusion_mib, bytes.data() + 3, sizeof(double));
  return d;
}

// Trials a search over these knobs runs: the start, the other fusion sizes, overlap flipped.
size_t planned_trials(const AutotuneOptions& o) {
  if (!o.search_overlap && !o.search_fusion) return 0;
  size_t n = o.search_overlap ? 2 : 1;
  if (o.search_fusion)
    for (double mib : o.fusion_candidates_mib) n += mib != o.start.fusion_mib;
  return n;
}

}  // namespace

std::string settings_text(const TuneSettings& s) {
  return str("overlap ", s.overlap ? "on" : "off", ", fusion ", number_text(s.fusion_mib), " MiB");
}

// ---- the search, without communication -------------------------------------------------------

// Bucket sizes first, with the start's overlap (on): the size only matters while buckets are
// reduced during backward; at 16 MiB a small model has one bucket, and overlap on and off time
// the same there. Then overlap flipped at the fastest size.
CoordinateSearch::CoordinateSearch(const AutotuneOptions& options)
    : options_(options), best_(options.start) {
  if (planned_trials(options_) == 0) return;
  plan_.push_back(options_.start);
  if (options_.search_fusion)
    for (double mib : options_.fusion_candidates_mib) {
      if (mib == options_.start.fusion_mib) continue;
      TuneSettings s = options_.start;
      s.fusion_mib = mib;
      plan_.push_back(s);
    }
  if (!options_.search_overlap) overlap_planned_ = true;
}

// The second coordinate, at the fastest size: known only once the sizes are timed.
void CoordinateSearch::plan_overlap_trial() {
  overlap_planned_ = true;
  TuneSettings flipped = best_;
  flipped.overlap = !flipped.overlap;
  plan_.push_back(flipped);
}

TuneSettings CoordinateSearch::current() const {
  return finished() ? best_ : plan_[next_];
}

void CoordinateSearch::record(double slowest_s) {
  RT_CHECK(!finished(), "CoordinateSearch::record after the search finished");
  times_.push_back(slowest_s);
  // The first trial is the incumbent; a challenger must beat it by the margin.
  if (next_ == 0 || slowest_s < best_s_ * (1 - options_.margin)) {
    best_ = plan_[next_];
    best_s_ = slowest_s;
  }
  ++next_;
  if (finished() && !overlap_planned_) plan_overlap_trial();
}

std::string CoordinateSearch::reason() const {
  const std::string note = options_.note.empty() ? "" : options_.note + "; ";
  if (plan_.empty())
    return options_.note.empty() ? "comm.overlap and comm.fusion_mib fixed: nothing to search"
                                 : note + "nothing else to search";
  std::string line = note + "slowest rank's median step:";
  for (size_t i = 0; i < times_.size(); ++i)
    line += str(i ? "; " : " ", settings_text(plan_[i]), " ", ms_text(times_[i]));
  const double start_s = times_.empty() ? 0 : times_[0];
  if (best_ == options_.start)
    return line + str("; the start kept (no other setting faster by more than ",
                      int(options_.margin * 100 + 0.5), "%)");
  return line + str("; ", settings_text(best_), " is ",
                    int((1 - best_s_ / start_s) * 1000 + 0.5) / 10.0, "% faster than the start");
}

// ---- across ranks --------------------------------------------------------------------------

Autotuner::Autotuner(const Communicator& comm, AutotuneOptions options)
    : comm_(comm), options_(options), search_(options), settings_(options.start) {
  RT_CHECK(options_.steps_per_trial >= 1 && options_.warmup_steps >= 0,
           "autotune: steps_per_trial ", options_.steps_per_trial, ", warmup_steps ",
           options_.warmup_steps);
  report_.chosen = options_.start;
  report_.steps_per_trial = options_.steps_per_trial;
  report_.search_steps =
      options_.warmup_steps + int(planned_trials(options_)) * options_.steps_per_trial;
  if (search_.trials() == 0) {
    report_.source = "fixed";
    report_.reason = search_.reason();
  } else if (comm_.size() == 1) {
    report_.source = "one rank";  // nothing is reduced: every setting runs the same step
    report_.reason = "one rank reduces nothing: no setting to compare";
  } else if (options_.run_steps < 2 * int64_t(report_.search_steps)) {
    report_.source = "short run";
    report_.reason = str("the run has ", options_.run_steps, " steps; a search takes ",
                         report_.search_steps, " and runs only within the first half of a run");
  } else {
    searching_ = true;
  }
  if (!searching_) report_.decided_at_step = 0;
}

void Autotuner::adopt(const TuneSettings& chosen) {
  searching_ = false;
  settings_ = chosen;
  report_ = AutotuneReport{};
  report_.source = "checkpoint";
  report_.chosen = chosen;
  report_.reason = "the choice recorded in the checkpoint (--resume does not search again)";
  report_.decided_at_step = 0;
}

// Collective: every step's time goes to rank 0, which decides whether the trial is over and
// which settings the next step runs, and broadcasts that.
bool Autotuner::step_done(double step_seconds) {
  const int64_t step = steps_seen_++;
  if (!searching_ || step < options_.warmup_steps) return false;
  if (trial_steps_++ == 0) trial_first_step_ = step;
  const std::vector<double> times = comm_.gather_to_root({step_seconds});
  Decision decision{settings_, false, false};
  if (comm_.rank() == 0) {
    samples_.resize(times.size());
    for (size_t r = 0; r < times.size(); ++r) samples_[r].push_back(times[r]);
    decision.trial_over = trial_is_over();
    if (decision.trial_over) close_trial();
    decision.settings = search_.current();
    decision.finished = search_.finished();
  }
  std::vector<uint8_t> bytes = comm_.rank() == 0 ? pack(decision) : std::vector<uint8_t>{};
  comm_.broadcast(bytes, 0);
  decision = unpack(bytes);
  const TuneSettings before = settings_;
  settings_ = decision.settings;
  if (decision.trial_over) trial_steps_ = 0;
  if (decision.finished) finish_search();
  return !(settings_ == before);
}

// Rank 0: all steps taken, or a challenger whose first step is far behind the incumbent.
bool Autotuner::trial_is_over() const {
  if (trial_steps_ >= options_.steps_per_trial) return true;
  const double incumbent = search_.best_seconds();
  double slowest = 0;
  for (const auto& rank : samples_) slowest = std::max(slowest, rank.back());
  return trial_steps_ == 1 && incumbent > 0 && slowest > incumbent * options_.abandon_factor;
}

// Rank 0: the trial's per-rank medians, the slowest of them to the search.
void Autotuner::close_trial() {
  Trial trial;
  trial.settings = search_.current();
  trial.first_step = trial_first_step_;
  trial.steps = trial_steps_;
  for (const auto& rank : samples_) trial.rank_median_s.push_back(median(rank));
  samples_.clear();
  trial.slowest_s = *std::max_element(trial.rank_median_s.begin(), trial.rank_median_s.end());
  report_.trials.push_back(trial);
  search_.record(trial.slowest_s);
}

void Autotuner::finish_search() {
  searching_ = false;
  report_.chosen = settings_;
  report_.decided_at_step = steps_seen_;
  if (comm_.rank() != 0) return;
  report_.reason = search_.reason();
  for (const Trial& t : report_.trials)
    if (t.settings == settings_) report_.chosen_step_s = t.slowest_s;
  // Only the slower settings cost anything: every trial step trains like any other.
  for (const Trial& t : report_.trials)
    report_.cost_s += std::max(0.0, t.slowest_s - report_.chosen_step_s) * double(t.steps);
}

std::string Autotuner::summary_line() const {
  const AutotuneReport& r = report_;
  std::string line = str("autotune: ", settings_text(r.chosen), " (", r.source, ")");
  if (r.source != "search") return line + ": " + r.reason;
  const double run_s = r.chosen_step_s * 100;
  int steps = 0;
  for (const Trial& t : r.trials) steps += t.steps;
  return line + str(" from step ", r.decided_at_step + 1, ", after ", r.trials.size(),
                    " trials in ", steps, " steps; ", r.reason, "; cost ", ms_text(r.cost_s), " = ",
                    run_s > 0 ? int(r.cost_s / run_s * 1000 + 0.5) / 10.0 : 0.0,
                    "% of 100 steps at the chosen setting");
}

}  // namespace ringtrain::comm::fusion
