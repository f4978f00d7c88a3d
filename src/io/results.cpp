// results.cpp — writes the results file: root attributes, /deck, /epochs, /timings, /comm,
// /summary, /test, /autotune.
#include "ringtrain/io/results.hpp"

#include "ringtrain/build_config.hpp"
#include "ringtrain/build_info.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::io {
namespace {

template <typename T>
void column(h5::Group& group, const std::string& name, const std::vector<T>& values,
            const char* units, const char* meaning) {
  h5::Dataset ds = group.write(name, values);
  ds.set_attr("units", units);
  ds.set_attr("description", meaning);
}

template <typename Row, typename T>
std::vector<T> pick(const std::vector<Row>& rows, T Row::*member) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(r.*member);
  return out;
}

void write_root_attributes(h5::Group& root, const RunInfo& info) {
  root.set_attr("ringtrain_version", RINGTRAIN_VERSION);
  root.set_attr("git_commit", RINGTRAIN_GIT_COMMIT);
  root.set_attr("start_time", info.start_time);
  root.set_attr("world_size", int32_t(info.world_size));
  root.set_attr("nodes", int32_t(info.nodes));
  root.set_attr("hosts", info.hosts);
  root.set_attr("backend", info.backend);
  root.set_attr("allreduce_algorithm", info.algorithm);
  root.set_attr("wire_format", info.wire);
  root.set_attr("precision", info.precision);
  root.set_attr("instruction_set", info.instruction_set);
  root.set_attr("libraries", info.libraries);
  root.set_attr("model", info.model);
  root.set_attr("dataset", info.dataset);
  root.set_attr("fusion_threshold_mib", info.fusion_mib);
  root.set_attr("first_bucket_mib", info.first_bucket_mib);
  root.set_attr("overlap", int32_t(info.overlap));
  root.set_attr("threads_per_rank", int32_t(info.threads_per_rank));
  root.set_attr("batch_per_rank", int32_t(info.batch_per_rank));
  root.set_attr("global_batch", int32_t(info.global_batch));
  root.set_attr("accumulate_steps", int32_t(info.accumulate_steps));
  root.set_attr("effective_batch", int64_t(info.effective_batch));
  root.set_attr("nonfinite_steps_skipped", int64_t(info.nonfinite_steps_skipped));
  root.set_attr("loss_scale", info.loss_scale);
  root.set_attr("loss_scale_final", info.loss_scale_final);
  root.set_attr("loss_scale_skipped_steps", int64_t(info.loss_scale_skipped_steps));
  root.set_attr("optimizer", info.optimizer);
  root.set_attr("clip_norm", info.clip_norm);
  root.set_attr("clipped_steps", int64_t(info.clipped_steps));
  root.set_attr("label_smoothing", info.label_smoothing);
  root.set_attr("ema_decay", info.ema_decay);
  root.set_attr("ema_test_loss", info.ema_test_loss);
  root.set_attr("ema_test_acc", info.ema_test_acc);
  root.set_attr("slurm_job_id", info.slurm_job_id);
}

void write_epochs(h5::Group& root, const std::vector<EpochRow>& rows) {
  h5::Group g = root.create_group("epochs");
  g.set_attr("description", "one row per epoch");
  column(g, "epoch", pick(rows, &EpochRow::epoch), "1", "epoch number, from 1");
  column(g, "steps", pick(rows, &EpochRow::steps), "1", "optimizer steps in the epoch");
  column(g, "train_loss", pick(rows, &EpochRow::train_loss), "nats",
         "mean cross-entropy over the epoch, all ranks");
  column(g, "train_acc", pick(rows, &EpochRow::train_acc), "fraction",
         "training accuracy, all ranks");
  column(g, "eval_loss", pick(rows, &EpochRow::eval_loss), "nats",
         "cross-entropy on the eval split (NaN: none)");
  column(g, "eval_acc", pick(rows, &EpochRow::eval_acc), "fraction",
         "accuracy on the eval split (NaN: none)");
  column(g, "seconds", pick(rows, &EpochRow::seconds), "s",
         "wall time of the epoch's training steps");
  column(g, "images_per_s", pick(rows, &EpochRow::images_per_s), "images/s",
         "global training throughput");
  column(g, "lr", pick(rows, &EpochRow::lr), "1", "learning rate at the epoch's last step");
  column(g, "grad_norm_mean", pick(rows, &EpochRow::grad_norm_mean), "1",
         "train.clip_norm: mean global L2 norm of the reduced gradient before clipping (NaN: "
         "clipping off)");
  column(g, "grad_norm_max", pick(rows, &EpochRow::grad_norm_max), "1",
         "train.clip_norm: largest global gradient norm of the epoch (NaN: clipping off)");
  column(g, "clipped_steps", pick(rows, &EpochRow::clipped_steps), "steps",
         "train.clip_norm: steps whose gradient was scaled down to clip_norm");
  column(g, "ema_eval_loss", pick(rows, &EpochRow::ema_eval_loss), "nats",
         "train.ema_decay: the averaged weights' loss on the eval split (NaN: none)");
  column(g, "ema_eval_acc", pick(rows, &EpochRow::ema_eval_acc), "fraction",
         "train.ema_decay: the averaged weights' accuracy on the eval split (NaN: none)");
}

void write_timings(h5::Group& root, const Timings& t) {
  h5::Group g = root.create_group("timings");
  g.set_attr("description", "per-step phase times; row r is rank r, column s is step s");
  g.set_attr("units", "s");
  for (const auto& phase : timing_phases()) {
    auto it = t.phases.find(phase);
    if (it == t.phases.end()) continue;
    RT_CHECK(it->second.size() == size_t(t.world_size * t.steps), "timings/", phase, " holds ",
             it->second.size(), " values, expected ", t.world_size, " x ", t.steps);
    h5::Dataset ds =
        g.write<double>(phase, {hsize_t(t.world_size), hsize_t(t.steps)}, it->second.data());
    ds.set_attr("units", "s");
  }
}

void write_comm(h5::Group& root, const CommRecords& c) {
  h5::Group g = root.create_group("comm");
  g.set_attr("description", "one row per fusion bucket reduced, every rank (rank-major)");
  column(g, "rank", c.rank, "1", "rank that recorded the bucket");
  column(g, "step", c.step, "1", "training step");
  column(g, "bucket", c.bucket, "1", "bucket index within the step, in reduction order");
  column(g, "bytes", c.bytes, "bytes", "fp32 payload of the bucket");
  column(g, "tensors", c.tensors, "1", "gradients fused into the bucket");
  column(g, "start_s", c.start_s, "s", "start, since the rank's engine started");
  column(g, "seconds", c.seconds, "s", "allreduce time of the bucket");
  column(g, "cpu_seconds", c.cpu_seconds, "s",
         "CPU time of the comm thread on the bucket (the reduction and MPI's polling)");
}

void write_summary(h5::Group& root, const Summary& s) {
  h5::Group g = root.create_group("summary");
  g.set_attr("images_per_s", s.images_per_s);
  g.set_attr("images_per_s_units", "images/s, global, training steps only");
  g.set_attr("time_per_epoch_s", s.time_per_epoch_s);
  g.set_attr("exposed_comm_fraction", s.exposed_comm_fraction);
  g.set_attr("exposed_comm_fraction_meaning",
             "time waiting in synchronize / total allreduce time (0: fully hidden)");
  g.set_attr("exposed_comm_fraction_last_rank", s.exposed_comm_fraction_last_rank);
  g.set_attr("exposed_comm_fraction_last_rank_meaning",
             "per step, the wait in synchronize of the rank that reached it last / its allreduce "
             "time: communication backward did not hide, without waits for a slower rank");
  g.set_attr("load_imbalance", s.load_imbalance);
  g.set_attr("load_imbalance_meaning", "max over ranks of mean step time / mean over ranks");
  g.set_attr("comm_cpu_fraction", s.comm_cpu_fraction);
  g.set_attr("comm_cpu_fraction_meaning",
             "CPU time of the comm thread's reductions / step time, mean over ranks (with one "
             "core per rank: the share of it communication took, MPI's polling included)");
  g.set_attr("test_loss", s.test_loss);
  g.set_attr("test_acc", s.test_acc);
  g.set_attr("scaling_efficiency", s.scaling_efficiency);
  g.set_attr("baseline", s.baseline);
}

void write_autotune(h5::Group& root, const AutotuneRecord& a, int world_size) {
  h5::Group g = root.create_group("autotune");
  g.set_attr("description",
             "comm.overlap and comm.fusion_mib: what the deck asked, the trials timed in the first "
             "steps (one row each), the choice and why");
  g.set_attr("overlap_setting", a.overlap_setting);
  g.set_attr("fusion_mib_setting", a.fusion_mib_setting);
  g.set_attr("source", a.source);
  g.set_attr("reason", a.reason);
  g.set_attr("overlap_chosen", int32_t(a.chosen_overlap));
  g.set_attr("fusion_mib_chosen", a.chosen_fusion_mib);
  g.set_attr("decided_at_step", a.decided_at_step);
  g.set_attr("search_steps", a.search_steps);
  g.set_attr("steps_per_trial", a.steps_per_trial);
  g.set_attr("cost_s", a.cost_s);
  g.set_attr("cost_meaning",
             "seconds the trials took beyond the chosen setting's step time (slowest rank); the "
             "trial steps train like any other and count in /timings and /summary");
  g.set_attr("chosen_step_s", a.chosen_step_s);
  const size_t trials = a.trial_slowest_s.size();
  if (trials == 0) return;
  RT_CHECK(a.trial_step_s.size() == trials * size_t(world_size),
           "autotune: ", a.trial_step_s.size(), " step times for ", trials, " trials x ",
           world_size, " ranks");
  column(g, "overlap", a.trial_overlap, "1", "the trial's comm.overlap (1: on)");
  column(g, "fusion_mib", a.trial_fusion_mib, "MiB", "the trial's comm.fusion_mib");
  column(g, "first_step", a.trial_first_step, "1", "the trial's first timed step, from 0");
  column(g, "steps", a.trial_steps, "1",
         "the trial's timed steps (fewer than steps_per_trial: abandoned, far behind)");
  g.write<double>("step_s", {hsize_t(trials), hsize_t(world_size)}, a.trial_step_s.data())
      .set_attr("description", "median step time of the trial, row = trial, column = rank");
  column(g, "slowest_s", a.trial_slowest_s, "s", "the slowest rank's median step time");
}

void write_test(h5::Group& root, const Results& r) {
  const size_t classes = r.class_names.size();
  if (r.test_confusion.empty() || r.test_confusion.size() != classes * classes) return;
  h5::Group g = root.create_group("test");
  h5::Dataset ds =
      g.write<int64_t>("confusion", {hsize_t(classes), hsize_t(classes)}, r.test_confusion.data());
  ds.set_attr("description", "test split, all ranks: row = true class, column = prediction");
  ds.set_attr("class_names", r.class_names);
}

// /inspect/<split>: attributes for the pass/fail figures, datasets per defect and zone.
void write_inspect(h5::Group& root, const std::vector<InspectFigures>& figures) {
  if (figures.empty()) return;
  h5::Group inspect = root.create_group("inspect");
  inspect.set_attr("description",
                   "inspection heads per split: verdict pass when P(pass) >= threshold (chosen on "
                   "the eval split for false_accept_target); false_accept = failing images called "
                   "passing / failing images, false_reject = passing called failing / passing");
  for (const InspectFigures& f : figures) {
    h5::Group g = inspect.create_group(f.split);
    g.set_attr("images", f.images);
    g.set_attr("pass_accuracy", f.pass_accuracy);
    g.set_attr("false_accept", f.false_accept);
    g.set_attr("false_reject", f.false_reject);
    g.set_attr("failing", f.failing);
    g.set_attr("passing", f.passing);
    g.set_attr("pass_auroc", f.pass_auroc);
    g.set_attr("threshold", f.threshold);
    g.set_attr("false_accept_target", f.false_accept_target);
    g.write("defect_f1", f.defect_f1).set_attr("names", f.defect_names);
    g.write("defect_auroc", f.defect_auroc).set_attr("names", f.defect_names);
    g.write("zone_accuracy", f.zone_accuracy)
        .set_attr("names", std::vector<std::string>{"A", "B", "C", "D"});
  }
}

}  // namespace

const std::vector<std::string>& timing_phases() {
  static const std::vector<std::string> phases{"data",           "forward",   "backward",
                                               "allreduce_wait", "optimizer", "step"};
  return phases;
}

std::string build_identity() {
  return str("ringtrain ", RINGTRAIN_VERSION, ", commit ", RINGTRAIN_GIT_COMMIT, ", ",
             RINGTRAIN_HAS_CUDA ? "CUDA" : "CPU", " build");
}

void write_weight_checks(h5::Group& root, const WeightChecks& w, int world_size) {
  h5::Group g = root.create_group("weight_checks");
  g.set_attr("description",
             "every rank's digest of its parameters and optimizer state, compared across ranks "
             "every verify_every steps and before each checkpoint; one row a check");
  g.set_attr("verify_every", w.verify_every);
  g.set_attr("on_divergence", w.on_divergence);
  g.set_attr("covers", w.covers_bn ? "parameters, optimizer state, BN running statistics"
                                   : "parameters, optimizer state");
  g.set_attr("repairs", w.repairs);
  const hsize_t checks = w.step.size();
  if (checks == 0) return;
  RT_CHECK(w.digest.size() == checks * hsize_t(world_size) && w.seconds.size() == w.digest.size(),
           "weight checks: ", w.digest.size(), " digests for ", checks, " checks x ", world_size,
           " ranks");
  column(g, "step", w.step, "1", "the optimizer step (from 1) after which the ranks compared");
  column(g, "repaired", w.repaired, "1", "1: ranks differed and took the majority's copy");
  g.write<uint64_t>("digest", {checks, hsize_t(world_size)}, w.digest.data())
      .set_attr("description", "the digest each rank held, row = check, column = rank");
  h5::Dataset seconds = g.write<double>("seconds", {checks, hsize_t(world_size)}, w.seconds.data());
  seconds.set_attr("units", "s");
  seconds.set_attr("description", "each rank's time in the check, row = check, column = rank");
}

void write_results(const std::string& path, const Results& r) {
  h5::AtomicFile out(path);
  h5::Group& root = out.root();
  write_root_attributes(root, r.info);
  root.write_string("deck", r.deck).set_attr("description", "the effective deck, as run");
  write_epochs(root, r.epochs);
  write_timings(root, r.timings);
  write_comm(root, r.comm);
  write_summary(root, r.summary);
  write_test(root, r);
  write_inspect(root, r.inspect);
  if (!r.autotune.source.empty()) write_autotune(root, r.autotune, r.info.world_size);
  write_weight_checks(root, r.weight_checks, r.info.world_size);
  out.commit();
}

BaselineFigures read_baseline(const std::string& path) {
  auto file = h5::File::open_read(path);
  BaselineFigures b;
  b.world_size = file.root().attr<int32_t>("world_size");
  b.batch_per_rank = file.root().attr<int32_t>("batch_per_rank");
  b.global_batch = file.root().attr<int32_t>("global_batch");
  b.images_per_s = file.root().open_group("summary").attr<double>("images_per_s");
  return b;
}

}  // namespace ringtrain::io
