// results.hpp — the run's results file (docs/RESULTS_FILE.md), written by rank 0, atomically.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ringtrain::io {

// Root attributes: what ran, where, how.
struct RunInfo {
  std::string start_time;  // ISO 8601, UTC
  int world_size = 1;
  int nodes = 1;
  std::vector<std::string> hosts;  // one per rank
  std::string backend, algorithm, precision, wire;
  std::string instruction_set;  // what the backend's kernels ran on ("avx512_core_bf16")
  std::string libraries;        // the device and library versions loaded ("oneDNN 2.6.3")
  std::string model, dataset;
  double fusion_mib = 0, first_bucket_mib = 0;
  bool overlap = true;
  int threads_per_rank = 1;
  int batch_per_rank = 0, global_batch = 0;  // global_batch: one micro-step, all ranks
  int accumulate_steps = 1;                  // micro-steps per optimizer step
  int64_t effective_batch = 0;               // samples per optimizer step: K x global_batch
  int64_t nonfinite_steps_skipped = 0;       // train.on_nonfinite = skip
  std::string loss_scale = "none";           // dynamic | none | the static scale
  double loss_scale_final = 1;               // the scale after the last step
  int64_t loss_scale_skipped_steps = 0;      // dynamic: steps skipped for an overflow
  std::string optimizer = "sgd";             // train.optimizer
  double clip_norm = 0;                      // train.clip_norm (0: off)
  int64_t clipped_steps = 0;                 // steps whose gradient was clipped
  double label_smoothing = 0;                // train.label_smoothing
  double ema_decay = 0;                      // train.ema_decay (0: no averages)
  double ema_test_loss = 0, ema_test_acc = 0;  // the averages on the test split (NaN: none)
  std::string slurm_job_id;                  // "" outside Slurm
};

// One row of /epochs per epoch.
struct EpochRow {
  int epoch = 0;
  int64_t steps = 0;
  double train_loss = 0, train_acc = 0;
  double eval_loss = 0, eval_acc = 0;  // NaN when no eval split
  double seconds = 0, images_per_s = 0, lr = 0;
  // train.clip_norm: the reduced gradient's global norm before clipping (mean and largest over
  // the epoch's steps; NaN when clipping is off) and the steps clipped.
  double grad_norm_mean = 0, grad_norm_max = 0;
  int64_t clipped_steps = 0;
  double ema_eval_loss = 0, ema_eval_acc = 0;  // train.ema_decay: the averages on the eval split
};

// Per-step phase timings of every rank: phase -> [world_size * steps] row-major, seconds.
struct Timings {
  int world_size = 1;
  int64_t steps = 0;
  std::map<std::string, std::vector<double>> phases;
};

// Per-bucket communication records of every rank, flattened rank-major (rank r's records
// are rows [offsets[r], offsets[r+1])).
struct CommRecords {
  std::vector<int64_t> rank, step, bucket, bytes, tensors;
  std::vector<double> start_s, seconds, cpu_seconds;
};

struct Summary {
  double images_per_s = 0;  // global, over the timed steps
  double time_per_epoch_s = 0;
  double exposed_comm_fraction = 0;            // allreduce_wait / allreduce time, all ranks
  double exposed_comm_fraction_last_rank = 0;  // the same, per step only the last rank to wait
  double load_imbalance = 0;                   // max over ranks of mean step time / mean over ranks
  double comm_cpu_fraction = 0;                // comm thread CPU time / step time, mean over ranks
  double test_loss = 0, test_acc = 0;          // NaN when no test split
  double scaling_efficiency = 0;               // NaN without a baseline
  std::string baseline;
};

// /inspect/<split>: the inspection heads' figures on a split (model.heads = inspect).
struct InspectFigures {
  std::string split;
  int64_t images = 0;
  std::vector<std::string> defect_names;
  std::vector<double> defect_f1, defect_auroc;  // per defect, at P >= 0.5
  std::vector<double> zone_accuracy;            // zones A..D at P >= 0.5
  double pass_accuracy = 0, false_accept = 0, false_reject = 0, pass_auroc = 0;
  int64_t failing = 0, passing = 0;
  double threshold = 0.5, false_accept_target = 0;
};

// /autotune: how the fusion engine's overlap and bucket size were chosen (one row a trial).
struct AutotuneRecord {
  std::string overlap_setting, fusion_mib_setting;  // as the deck asked: auto, or a value
  std::string source;                               // search | fixed | checkpoint | short run
  std::string reason;
  bool chosen_overlap = true;
  double chosen_fusion_mib = 0;
  int64_t decided_at_step = 0;  // the step (from 0, this process) the choice applies from
  int64_t search_steps = 0;     // warm-up + trial steps of the search
  int64_t steps_per_trial = 0;
  double cost_s = 0;         // the trials' time beyond the chosen setting's, slowest rank
  double chosen_step_s = 0;  // the chosen setting's trial time, slowest rank (0: no trial)
  std::vector<int32_t> trial_overlap;
  std::vector<double> trial_fusion_mib;
  std::vector<int64_t> trial_first_step;
  std::vector<int64_t> trial_steps;  // fewer than steps_per_trial: abandoned after its first step
  std::vector<double> trial_step_s;  // [trials x world size], each rank's median step
  std::vector<double> trial_slowest_s;
};

// /weight_checks: the ranks' weight digests compared (train/weight_check.hpp), one row a check.
struct WeightChecks {
  int64_t verify_every = 0;
  std::string on_divergence;
  bool covers_bn = false;
  int64_t repairs = 0;
  std::vector<int64_t> step;
  std::vector<int32_t> repaired;  // 1: the ranks differed and were repaired at that check
  std::vector<uint64_t> digest;   // [checks x world size], as each rank held it when compared
  std::vector<double> seconds;    // [checks x world size], each rank's time in the check
};

struct Results {
  std::string deck;  // effective deck text
  RunInfo info;
  std::vector<EpochRow> epochs;
  Timings timings;
  CommRecords comm;
  Summary summary;
  std::vector<int64_t> test_confusion;  // [classes x classes], row = true class; empty: none
  std::vector<std::string> class_names;
  std::vector<InspectFigures> inspect;  // empty: model.heads = class
  AutotuneRecord autotune;
  WeightChecks weight_checks;
};

// Writes path atomically (temp file, then rename). Throws ringtrain::Error naming the file.
void write_results(const std::string& path, const Results& results);

// What built this binary, as the results file records it: "ringtrain 0.1.0, commit C, CUDA
// build" (or "CPU build"). Ranks compare it at start (train/config_agreement.hpp).
std::string build_identity();

// The phases /timings holds, in order.
const std::vector<std::string>& timing_phases();

// Reads the /summary images_per_s and world size of an earlier results file (a baseline).
struct BaselineFigures {
  double images_per_s = 0;
  int world_size = 1;
  int batch_per_rank = 0;
  int global_batch = 0;
};
BaselineFigures read_baseline(const std::string& path);

}  // namespace ringtrain::io
