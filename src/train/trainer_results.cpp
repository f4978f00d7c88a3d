// trainer_results.cpp — the Trainer's results file: every rank's timings and bucket records
// gathered, the run's figures and the summary line, written by rank 0.
#include "trainer_run.hpp"

namespace ringtrain::train {
namespace {

std::vector<double> column_of(const std::vector<comm::fusion::BucketRecord>& records,
                              double (*get)(const comm::fusion::BucketRecord&)) {
  std::vector<double> out;
  out.reserve(records.size());
  for (const auto& r : records) out.push_back(get(r));
  return out;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

}  // namespace

void Trainer::write_results(double test_loss, double test_acc,
                            const std::vector<double>& confusion) {
  io::Results r;
  const int world = comm_.size();
  // Every rank takes part in the gathers; rank 0 writes.
  r.timings.world_size = world;
  r.timings.steps = int64_t(phases_.steps());
  for (auto& [phase, values] : phases_.columns())
    r.timings.phases[phase] = comm_.gather_to_root(values);
  const auto& records = parallel_->engine().records();
  auto gather = [&](double (*get)(const comm::fusion::BucketRecord&)) {
    return comm_.gather_to_root(column_of(records, get));
  };
  std::vector<double> step =
      gather([](const comm::fusion::BucketRecord& b) { return double(b.step); });
  std::vector<double> bucket =
      gather([](const comm::fusion::BucketRecord& b) { return double(b.bucket); });
  std::vector<double> bytes =
      gather([](const comm::fusion::BucketRecord& b) { return double(b.bytes); });
  std::vector<double> tensors =
      gather([](const comm::fusion::BucketRecord& b) { return double(b.tensors); });
  r.comm.start_s = gather([](const comm::fusion::BucketRecord& b) { return b.start_s; });
  r.comm.seconds = gather([](const comm::fusion::BucketRecord& b) { return b.seconds; });
  r.comm.cpu_seconds = gather([](const comm::fusion::BucketRecord& b) { return b.cpu_seconds; });
  std::vector<std::string> hosts = comm_.gather_strings_to_root(comm_.hostname());
  r.weight_checks = weight_checks_record(comm_, *weight_check_, cfg_.comm);
  if (comm_.rank() != 0) return;

  r.comm.step = cast<int64_t>(step);
  r.comm.bucket = cast<int64_t>(bucket);
  r.comm.bytes = cast<int64_t>(bytes);
  r.comm.tensors = cast<int64_t>(tensors);
  for (int rank = 0; rank < world; ++rank)
    r.comm.rank.insert(r.comm.rank.end(), records.size(), rank);
  r.deck = cfg_.effective_deck;
  auto& info = r.info;
  info.start_time = start_time_;
  info.world_size = world;
  info.nodes = comm_.node_count();
  info.hosts = hosts;
  info.backend = backend_->name();
  info.algorithm = grad_reducer_->name();
  info.precision = cfg_.train.precision;
  info.instruction_set = backend_->instruction_set();
  info.libraries = backend_->libraries();
  info.wire = cfg_.comm.wire;
  info.model = model_->name();
  info.dataset = train_loader_->info().dataset;
  info.fusion_mib = parallel_->engine().fusion_mib();  // the autotune's choice, or the deck's
  info.first_bucket_mib = cfg_.comm.first_bucket_mib;
  info.overlap = parallel_->engine().overlap();
  r.autotune =
      autotune_record(parallel_->autotuner()->report(), cfg_.comm.overlap, cfg_.comm.fusion_mib);
  info.threads_per_rank = threads_;
  info.batch_per_rank = batch_per_rank_;
  info.global_batch = batch_per_rank_ * world;
  info.accumulate_steps = accumulate_steps_;
  info.effective_batch = int64_t(info.global_batch) * accumulate_steps_;
  info.nonfinite_steps_skipped = nonfinite_skipped_;
  info.loss_scale = cfg_.train.loss_scale;
  info.loss_scale_final = scaler_ ? scaler_->scale() : 1.0;
  info.loss_scale_skipped_steps = scaler_ ? scaler_->overflow_steps() : 0;
  info.optimizer = cfg_.train.optimizer;
  info.clip_norm = cfg_.train.clip_norm;
  info.clipped_steps = clipper_ ? clipper_->clipped_total() : 0;
  info.label_smoothing = cfg_.train.label_smoothing;
  info.ema_decay = cfg_.train.ema_decay;
  info.ema_test_loss = ema_test_.first;
  info.ema_test_acc = ema_test_.second;
  if (const char* job = std::getenv("SLURM_JOB_ID")) info.slurm_job_id = job;
  r.epochs = epochs_;
  r.summary =
      summarise(r.timings, r.comm, warmup_steps(phases_.steps()), int(info.effective_batch));
  double epoch_seconds = 0;
  for (const auto& e : epochs_) epoch_seconds += e.seconds;
  r.summary.time_per_epoch_s = epochs_.empty() ? 0 : epoch_seconds / double(epochs_.size());
  r.test_confusion = cast<int64_t>(confusion);
  r.class_names = train_loader_->info().class_names;
  r.inspect = inspect_figures_;
  r.summary.test_loss = test_loss;
  r.summary.test_acc = test_acc;
  r.summary.scaling_efficiency = kNaN;
  if (!cfg_.output.baseline.empty()) {
    io::BaselineFigures base = io::read_baseline(cfg_.output.baseline);
    r.summary.baseline = cfg_.output.baseline;
    if (base.images_per_s > 0)
      r.summary.scaling_efficiency =
          (r.summary.images_per_s / world) / (base.images_per_s / base.world_size);
  }
  io::write_results(cfg_.results_path(), r);
  log::info(str("summary: ", int64_t(r.summary.images_per_s), " img/s over ", world,
                " rank(s) | exposed comm ", int(r.summary.exposed_comm_fraction * 100 + 0.5),
                "% of allreduce time (last rank to wait: ",
                int(r.summary.exposed_comm_fraction_last_rank * 100 + 0.5), "%) | comm thread CPU ",
                int(r.summary.comm_cpu_fraction * 1000 + 0.5) / 10.0,
                "% of step time | load imbalance ", r.summary.load_imbalance,
                std::isnan(test_acc) ? std::string() : str(" | test acc ", test_acc)));
  if (scaler_)
    log::info(str("loss scale: ", scaler_->scale(), " at the end; ", scaler_->overflow_steps(),
                  " step(s) skipped for a gradient overflow"));
  log::info(str("results: ", cfg_.results_path()));
}

}  // namespace ringtrain::train
