// autotune.hpp — the fusion engine's overlap and bucket size chosen from timed training steps:
// a short coordinate search decided on rank 0 from the slowest rank's times and broadcast, so
// every rank switches at the same step boundary.
//
// How a search goes (comm.overlap = auto, comm.fusion_mib = auto):
//
//   steps 1..W         warm-up, not timed (kernels are built, caches filled)
//   trial 1            the start setting (overlap on, fusion_mib 16), T timed steps
//   trials 2..         overlap on with 0.5, 4 and 64 MiB             (when fusion is searched)
//   last trial         overlap flipped at the fastest size           (when overlap is searched)
//   then               the fastest setting for the rest of the run (a run shorter than twice
//                      the search keeps the start)
//
// A trial's time is the median of its T steps on each rank, then the slowest rank's median
// (a step is as fast as its slowest rank). A challenger replaces the incumbent only when it is
// faster by more than the margin, so noise does not move a well-chosen start. A challenger
// whose first step is already far slower than the incumbent (abandon_factor) ends after that
// step, and fusion sizes that lay out the same buckets as one already tried are not tried.
// The trial steps are real training steps: the search costs only what its slower settings took
// beyond the chosen one's time (AutotuneReport::cost_s).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/comm/fusion/fusion_engine.hpp"  // kDefaultFusionMib

namespace ringtrain::comm {
class Communicator;
}

namespace ringtrain::comm::fusion {

struct TuneSettings {
  bool overlap = true;                    // FusionOptions::overlap
  double fusion_mib = kDefaultFusionMib;  // FusionOptions::fusion_mib
  bool operator==(const TuneSettings& o) const {
    return overlap == o.overlap && fusion_mib == o.fusion_mib;
  }
};

// "overlap on, fusion 16 MiB"
std::string settings_text(const TuneSettings& s);

struct AutotuneOptions {
  TuneSettings start;          // the first steps' settings; a knob not searched keeps its value
  bool search_overlap = true;  // false: comm.overlap was fixed in the deck or on the command line
  bool search_fusion = true;   // false: comm.fusion_mib was fixed
  // Tried beside start.fusion_mib: a small model's gradients (fibernet: 1.2 MiB) need the
  // 0.5 MiB buckets to overlap at all; a large one's (resnet18_cifar: 43 MiB) run in few calls.
  std::vector<double> fusion_candidates_mib = {0.5, 4, 64};
  int warmup_steps = 3;          // untimed steps before the first trial
  int steps_per_trial = 3;       // timed steps of each setting
  double margin = 0.02;          // a challenger must be faster by this fraction to win
  double abandon_factor = 1.25;  // a challenger's first step this much slower ends its trial
  int64_t run_steps = 0;         // the steps this process will train; a search needs 2x its own
  std::string note;              // for the reason: what was left out of the search, and why
};

// One setting's trial: its steps' median on every rank.
struct Trial {
  TuneSettings settings;
  int64_t first_step = 0;             // this process's step index of its first timed step, from 0
  int steps = 0;                      // timed steps (fewer than steps_per_trial: abandoned)
  std::vector<double> rank_median_s;  // one per rank
  double slowest_s = 0;               // max of rank_median_s
};

// What was decided and why; complete on rank 0 (the others hold only the settings).
struct AutotuneReport {
  std::string source = "search";  // search | fixed | checkpoint | short run | one rank
  TuneSettings chosen;
  std::string reason;
  std::vector<Trial> trials;
  int64_t decided_at_step = -1;  // this process's step index from which chosen applies
  int search_steps = 0;          // warm-up + trial steps the search took (or would take)
  int steps_per_trial = 0;
  double cost_s = 0;         // the trials' time beyond the chosen setting's, slowest rank
  double chosen_step_s = 0;  // the chosen setting's trial time (slowest rank), 0: no trial
};

// The search's plan and decision, without communication: the caller feeds each trial's time.
class CoordinateSearch {
 public:
  explicit CoordinateSearch(const AutotuneOptions& options);
  bool finished() const { return next_ >= plan_.size(); }
  // The setting the current trial runs (the best one once finished).
  TuneSettings current() const;
  // The current trial took `slowest_s` (the slowest rank's median step); the next one begins.
  void record(double slowest_s);
  TuneSettings best() const { return best_; }
  // The incumbent's time; 0 before the first trial is recorded.
  double best_seconds() const { return best_s_; }
  // One line: each trial's time and the choice against the start.
  std::string reason() const;
  size_t trials() const { return plan_.size(); }

 private:
  void plan_overlap_trial();

  AutotuneOptions options_;
  std::vector<TuneSettings> plan_;
  std::vector<double> times_;
  size_t next_ = 0;
  bool overlap_planned_ = false;
  TuneSettings best_;
  double best_s_ = 0;
};

// The search run across ranks. Collective: every rank calls step_done() after every step.
class Autotuner {
 public:
  Autotuner(const Communicator& comm, AutotuneOptions options);
  // A choice recorded earlier (a checkpoint): no search, these settings from the first step.
  void adopt(const TuneSettings& chosen);
  // The settings the next step runs with.
  TuneSettings settings() const { return settings_; }
  bool searching() const { return searching_; }
  // Collective, after each step: this rank's step time. True when settings() changed: the
  // caller applies them before the next step (every rank at the same boundary).
  bool step_done(double step_seconds);
  const AutotuneReport& report() const { return report_; }
  // The log's line, rank 0: what was chosen, why, and what the search cost.
  std::string summary_line() const;

 private:
  bool trial_is_over() const;
  void close_trial();
  void finish_search();

  const Communicator& comm_;
  AutotuneOptions options_;
  CoordinateSearch search_;
  TuneSettings settings_;
  bool searching_ = false;
  int64_t steps_seen_ = 0;
  int64_t trial_first_step_ = 0;
  int trial_steps_ = 0;
  std::vector<std::vector<double>> samples_;  // rank 0: every rank's times in the current trial
  AutotuneReport report_;
};

}  // namespace ringtrain::comm::fusion
