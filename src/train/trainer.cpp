// trainer.cpp — one training run: set-up agreed by every rank, epochs of overlapped steps,
// evaluation across ranks, and the results file.
#include "ringtrain/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/fault.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/io/results.hpp"
#include "ringtrain/nn/lr_schedule.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/nn/weight_average.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/data_parallel.hpp"
#include "ringtrain/train/fail_together.hpp"
#include "ringtrain/train/gather_rows.hpp"
#include "ringtrain/train/gpu_binding.hpp"
#include "ringtrain/train/gradient_clip.hpp"
#include "ringtrain/train/host_memory.hpp"
#include "ringtrain/train/inspect_metrics.hpp"
#include "ringtrain/train/loss_scale.hpp"
#include "ringtrain/train/phases.hpp"
#include "ringtrain/train/report.hpp"
#include "ringtrain/train/view_average.hpp"
#include "ringtrain/train/weight_check.hpp"
#include "trainer_run.hpp"

namespace ringtrain::train {
namespace {

// data.dir and a split key checked before ShardSet opens them: ShardSet's messages name files
// and folders, and a newcomer needs the key to change (a wrong path, a misspelt split).
void check_split_exists(const DataConfig& d, const std::string& key, const std::string& split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(d.dir, ec))
    throw InputError(str("data.dir = ", d.dir, ": ",
                         fs::exists(d.dir, ec) ? "not a directory" : "no such directory",
                         "; set data.dir to a folder of shards (rt-shard or rt-fibergen --output ",
                         d.dir, " makes one)"));
  const std::regex shard(R"((.+)-\d{5}-of-\d{5}\.h5)");
  std::set<std::string> splits;
  for (const auto& entry : fs::directory_iterator(d.dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, shard)) splits.insert(m[1].str());
  }
  if (splits.count(split)) return;
  if (splits.empty())
    throw InputError(str("data.dir = ", d.dir, ": holds no shards (<split>-NNNNN-of-NNNNN.h5); ",
                         "set data.dir to a folder of shards (rt-shard or rt-fibergen --output ",
                         d.dir, " makes one)"));
  std::string names;
  for (const auto& name : splits) names += (names.empty() ? "" : ", ") + name;
  throw InputError(str(key, " = ", split, ": ", d.dir, " has no shards of that split (it has ",
                       names, "); set ", key, " to one of them",
                       key == "data.train_split" ? "" : " or to \"\" for none"));
}
// A rank's own memory before any batch: MPI, oneDNN's kernels and the node's shared-memory
// segments, measured at about 200 MB resident on fibernet; with margin. (The per-image estimate
// matched the measured growth of resident memory per image within 4 % for fibernet,
// cnn_small and resnet18_cifar on 256 px.)
constexpr int64_t kProcessBytes = int64_t(256) << 20;

// "recall per class: clean 0.99, scratch 0.97, ..." from a confusion matrix.
std::string per_class_line(const std::vector<double>& confusion,
                           const std::vector<std::string>& names) {
  const size_t classes = names.size();
  if (classes == 0 || confusion.size() != classes * classes) return "";
  std::string line = "recall per class:";
  for (size_t c = 0; c < classes; ++c) {
    double row = 0;
    for (size_t p = 0; p < classes; ++p) row += confusion[c * classes + p];
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.3f", row > 0 ? confusion[c * classes + c] / row : 0.0);
    line += (c ? "," : "") + std::string(" ") + names[c] + buf;
  }
  return line;
}

}  // namespace

// ---- set-up -----------------------------------------------------------------------------

void Trainer::set_up() {
  start_time_ = utc_now();
  accumulate_steps_ = cfg_.train.accumulate_steps;
  batch_per_rank_ = cfg_.train.batch_per_rank > 0
                        ? cfg_.train.batch_per_rank
                        : cfg_.train.global_batch / (comm_.size() * accumulate_steps_);
  threads_ = cfg_.train.threads > 0 ? cfg_.train.threads : comm_.cpu_threads_per_rank();
  std::string oversubscribed =
      threads_warning(cfg_, comm_.cpu_threads_per_rank(), comm_.cpu_threads_description());
  if (comm_.rank() == 0 && !oversubscribed.empty()) log::warn(oversubscribed);
  watch_set_up();
  fail_together_watched([&] {
    if (comm_.rank() == 0) h5::require_writable_dir(cfg_.output.dir, "output.dir");
    if (comm_.rank() == 0) prepare_output_paths(cfg_);  // checkpoint dir, baseline: before training
    open_data();
  });
  fail_together_watched([&] {
    build_model();
    model_->preset_weight_grad_choices(cfg_.train.conv_weight_grad_choices,
                                       "train.conv_weight_grad_choices");
  });
  card_ = model_card();
  fail_together_watched([&] { build_comm(); });  // a schedule mismatch throws on every rank alike
  fail_together_watched([&] {
    build_optimizer();
    build_loss_scaler();
  });
  checkpoint_ = std::make_unique<CheckpointState>(cfg_, comm_, batch_per_rank_);
  checkpoint_->remove_stale_temp_files();
  weight_check_ = std::make_unique<WeightCheck>(cfg_.comm, comm_, *model_, *optimizer_, *backend_);
  std::optional<comm::fusion::TuneSettings> tuned;  // the checkpoint's autotune choice
  if (cfg_.resume) {
    fail_together_watched([&] {
      ResumePoint at = checkpoint_->load(*model_, *optimizer_, scaler_.get(), ema_.get());
      global_step_ = at.global_step;
      if (at.pass_threshold) card_.pass_threshold = *at.pass_threshold;
      tuned = at.tuned;
      weight_grads_from_checkpoint_ =
          at.weight_grads_preset && cfg_.train.conv_weight_grad == "measure";
      if (scaler_) parallel_->set_loss_scale(scaler_->scale());
      verify_resumed_weights(*weight_check_, at, cfg_.checkpoint_path());
    });
    weight_check_->set_checkpoint_step(global_step_);
    first_epoch_ = int(global_step_ / steps_per_epoch_) + 1;
    skip_steps_ = global_step_ % steps_per_epoch_;
    log::info(str("resumed from ", cfg_.checkpoint_path(), " at step ", global_step_, " (epoch ",
                  first_epoch_, ", step ", skip_steps_, ")"));
  }
  parallel_->start_autotune(autotune_options(cfg_.comm, total_steps_ - global_step_),
                            tuned ? &*tuned : nullptr);
  setup_watch_.reset();  // no longer registered: build_comm put the engine's in its place
}

// Until the engine's watchdog exists, one of its own watches the set-up's collectives: a rank
// that never reaches one (stopped, or hung opening the data) ends the job with a report instead
// of a hang.
void Trainer::watch_set_up() {
  if (comm_.size() == 1) return;
  setup_watch_ = std::make_unique<comm::fusion::PhaseWatch>(comm_, cfg_.comm.stall_timeout_s);
  watch_ = setup_watch_.get();
  comm_.set_stall_watch(watch_);
  watch_registration_.comm = &comm_;
  enter_phase(Phase::kSetUp);
}

// fail_together() with the whole phase watched: its collectives (the allreducers' and the
// engine's set-up, not only fail_together's own) and the work between them (I/O:
// io_phase_timeout_factor()).
void Trainer::fail_together_watched(const std::function<void()>& phase) {
  comm::WatchedCollective watched(watch_);
  fail_together(comm_, phase);
}

void Trainer::open_data() {
  data::LoaderOptions train;
  train.batch_per_rank = batch_per_rank_;
  train.shuffle = cfg_.data.shuffle;
  train.augment = data::parse_augment(cfg_.data.augment);
  train.augment_pad = cfg_.data.augment_pad;
  views_ = data::tta_views(data::parse_tta(cfg_.data.tta, "data.tta ="));
  train.prefetch_batches = cfg_.data.prefetch_batches;
  train.seed = cfg_.train.seed;
  train.remainder = data::parse_remainder(cfg_.data.remainder);
  train.rank = comm_.rank();
  train.world_size = comm_.size();
  train.accumulate_steps = accumulate_steps_;
  inspect_ = nn::parse_heads(cfg_.model.heads) == nn::Heads::kInspect;
  train.inspect_labels = inspect_;
  train.max_samples = cfg_.data.samples_per_rank > 0 ? cfg_.data.samples_per_rank * comm_.size()
                                                     : cfg_.data.max_train_samples;
  check_split_exists(cfg_.data, "data.train_split", cfg_.data.train_split);
  if (!cfg_.data.eval_split.empty())
    check_split_exists(cfg_.data, "data.eval_split", cfg_.data.eval_split);
  if (!cfg_.data.test_split.empty())
    check_split_exists(cfg_.data, "data.test_split", cfg_.data.test_split);
  data::ShardSet train_shards = data::ShardSet::open(cfg_.data.dir, cfg_.data.train_split);
  if (train.max_samples > train_shards.size())
    throw InputError(str(cfg_.deck_path, ": ", train.max_samples, " train samples wanted (",
                         cfg_.data.samples_per_rank > 0 ? "data.samples_per_rank x world size"
                                                        : "data.max_train_samples",
                         "), but ", cfg_.data.dir, " has ", train_shards.size()));
  check_batch_fits_split(train.max_samples > 0 ? train.max_samples : train_shards.size(),
                         train.remainder);
  train_loader_ = std::make_unique<data::Loader>(std::move(train_shards), train);
  const data::DatasetInfo& shape = train_loader_->info();
  RT_REQUIRE_INPUT(views_.size() <= 2 || shape.height == shape.width,
                   "data.tta = dihedral: the images are ", shape.height, "x", shape.width,
                   "; their rotations by 90 degrees need square ones");

  data::LoaderOptions eval = train;
  eval.shuffle = false;
  eval.augment = data::AugmentKind::kNone;
  eval.remainder = data::Remainder::kAll;
  eval.max_samples = 0;
  eval.accumulate_steps = 1;
  // The model is built for the train split's shape and classes: so must every split be.
  const data::DatasetInfo& trained = train_loader_->info();
  if (!cfg_.data.eval_split.empty())
    eval_loader_ = std::make_unique<data::Loader>(
        data::ShardSet::open_matching(trained, cfg_.data.dir, cfg_.data.eval_split), eval);
  if (!cfg_.data.test_split.empty())
    test_loader_ = std::make_unique<data::Loader>(
        data::ShardSet::open_matching(trained, cfg_.data.dir, cfg_.data.test_split), eval);

  steps_per_epoch_ = train_loader_->steps_per_epoch() / accumulate_steps_;  // whole groups
  total_steps_ = steps_per_epoch_ * cfg_.train.epochs;
  if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);
}

// With data.remainder = drop an epoch holds only whole optimizer steps: a split smaller than one
// has none. The sampler refuses it too, but without knowing which key set the batch.
void Trainer::check_batch_fits_split(int64_t samples, data::Remainder remainder) const {
  const int64_t per_step = int64_t(comm_.size()) * accumulate_steps_;
  if (remainder != data::Remainder::kDrop || samples >= per_step * batch_per_rank_) return;
  const bool global = cfg_.train.global_batch > 0;
  const std::string key = global ? "train.global_batch" : "train.batch_per_rank";
  const int64_t value = global ? cfg_.train.global_batch : batch_per_rank_;
  const int64_t largest = global ? samples / per_step * per_step : samples / per_step;
  throw InputError(
      str(key, " = ", value, ": one optimizer step takes ", per_step * batch_per_rank_, " images (",
          accumulate_steps_ > 1 ? str(accumulate_steps_, " micro-batches x ") : std::string(),
          comm_.size(), " ranks x ", batch_per_rank_, "), but split '", cfg_.data.train_split,
          "' holds ", samples, "; ",
          largest > 0 ? str("set ", key, " to at most ", largest, " or data.remainder = pad")
                      : std::string("set data.remainder = pad or run fewer ranks")));
}

void Trainer::build_model() {
  backend_ = make_rank_backend(comm_, cfg_.train, threads_, &cuda_device_);
  const auto& info = train_loader_->info();
  const nn::HeadsSpec heads{nn::parse_heads(cfg_.model.heads),
                            int(train_loader_->defect_names().size())};
  model_ = nn::make_model(cfg_.model.name, {info.channels, info.height, info.width}, info.classes,
                          *backend_, cfg_.train.seed, heads);
  // A batch too large for the host ended in the OOM killer, or a failed allocation deep in the
  // first step naming bytes and a source line; checked here, before any activation or batch
  // exists, it is one line naming the key and the largest batch that fits. GPU memory: not here.
  if (cfg_.train.backend != "cuda") check_batch_memory();
  timeline_ = std::make_unique<comm::fusion::Timeline>(cfg_.output.timeline, comm_.rank());
  if (timeline_->enabled()) {
    model_->set_layer_timer([this](const std::string& layer, bool backward, double seconds) {
      auto& names = layer_names_[&layer];
      if (!names.first) {
        names.first = timeline_->intern("forward " + layer);
        names.second = timeline_->intern("backward " + layer);
      }
      double t1 = comm::fusion::Timeline::now();
      timeline_->span(backward ? names.second : names.first, backward ? "backward" : "forward",
                      t1 - seconds, t1);
    });
  }
}

void Trainer::check_batch_memory() const {
  const auto& info = train_loader_->info();
  const int64_t floats_per_image = int64_t(info.channels) * info.height * info.width;
  BatchMemory need;
  // Beside the activations: the loader's queue of float images, the batch it builds, the one
  // being trained and the model's input tensor.
  need.per_image_bytes = model_->activation_bytes_per_image() +
                         (int64_t(cfg_.data.prefetch_batches) + 3) * floats_per_image * 4;
  // Weights, gradients, momentum, the accumulation scratch and oneDNN's reordered copies, fp32
  // (cnn_small on 256 px, 34 M parameters, measured 1.4 GB before its first image); and the
  // process itself (MPI, oneDNN, the shared-memory segments).
  need.fixed_bytes = model_->parameter_count() * 4 * 8 + kProcessBytes;
  need.batch_per_rank = batch_per_rank_;
  need.ranks_on_node = comm_.local_size();
  const std::string error = batch_memory_error(
      need, host_memory(),
      str(model_->name(), " on ", info.channels, "x", info.height, "x", info.width),
      cfg_.train.global_batch > 0, comm_.size(), accumulate_steps_);
  if (!error.empty()) throw InputError(error);
}

void Trainer::build_comm() {
  comm::allreduce::AllreduceOptions options;
  options.wire = comm::allreduce::parse_wire(cfg_.comm.wire);
  options.chunk_bytes = size_t(cfg_.comm.chunk_kib) * 1024;
  options.ranks_per_node = cfg_.comm.ranks_per_node;
  options.shared_memory = cfg_.comm.shared_memory;
  options.cuda_device = cuda_device_;  // -1 on the cpu backends: no staging, no CUDA call
  options.stall_timeout_s = cfg_.comm.stall_timeout_s;
  grad_reducer_ = comm::allreduce::make_allreducer(
      comm_, comm::allreduce::parse_algorithm(cfg_.comm.algorithm), options);
  stat_reducer_ = comm::allreduce::make_allreducer(comm_, comm::allreduce::Algorithm::mpi,
                                                   comm::allreduce::AllreduceOptions{});
  if (cfg_.comm.sync_bn && comm_.size() > 1)
    model_->set_stat_reducer([this](float* v, size_t n) {
      enter_phase(Phase::kSyncBatchNorm);
      comm::WatchedCollective watched(watch_);
      stat_reducer_->sum(v, n);
    });

  parallel_ =
      std::make_unique<DataParallel>(comm_, *model_, *backend_, *grad_reducer_, *stat_reducer_,
                                     engine_options(cfg_.comm), timeline_.get(), accumulate_steps_);
  watch_ = parallel_->engine().stall_watch();
  comm_.set_stall_watch(watch_);
  watch_registration_.comm = &comm_;
  enter_phase(Phase::kSetUp);  // the engine's watchdog takes over the rest of the set-up
}

void Trainer::build_optimizer() {
  const TrainConfig& t = cfg_.train;
  nn::OptimizerOptions o;
  o.kind = nn::parse_optimizer(t.optimizer);
  o.momentum = t.momentum;
  o.nesterov = t.nesterov;
  o.weight_decay = t.weight_decay;
  o.decay_bn_and_bias = t.decay_bn_and_bias;
  o.beta1 = t.beta1, o.beta2 = t.beta2, o.eps = t.adam_eps;
  o.trust_coef = t.trust_coef;
  optimizer_ = std::make_unique<nn::Optimizer>(model_->parameters(), o, *backend_);
  if (t.clip_norm > 0)
    clipper_ = std::make_unique<GradientClipper>(t.clip_norm, model_->parameters(), *backend_);
  if (t.ema_decay > 0) ema_ = std::make_unique<nn::WeightAverage>(*model_, t.ema_decay);

  const int64_t global_batch = int64_t(batch_per_rank_) * comm_.size() * accumulate_steps_;
  nn::LRScheduleOptions lr;
  lr.base_lr = cfg_.train.scale_lr
                   ? nn::scaled_lr(cfg_.train.lr, global_batch, cfg_.train.base_batch)
                   : cfg_.train.lr;
  lr.warmup_steps = int64_t(std::llround(cfg_.train.warmup_epochs * double(steps_per_epoch_)));
  // The schedule spans the deck's epochs even when train.max_steps stops the run early,
  // so a run stopped and resumed follows the same learning rates as one that was not.
  lr.total_steps = std::max<int64_t>(steps_per_epoch_ * cfg_.train.epochs, 1);
  lr.decay = cfg_.train.schedule;
  for (int e : cfg_.train.step_epochs) lr.milestones.push_back(int64_t(e) * steps_per_epoch_);
  lr.gamma = cfg_.train.step_gamma;
  schedule_ = std::make_unique<nn::LRSchedule>(lr);
}

// train.loss_scale: none, dynamic from train.loss_scale_init, or a static scale.
void Trainer::build_loss_scaler() {
  const TrainConfig& t = cfg_.train;
  if (t.loss_scale == "none") return;
  LossScaleOptions options;
  options.dynamic = t.loss_scale == "dynamic";
  options.init = options.dynamic ? t.loss_scale_init : std::stod(t.loss_scale);  // validated
  options.growth_interval = t.loss_scale_growth_interval;
  scaler_ = std::make_unique<LossScaler>(options);
  parallel_->set_loss_scale(scaler_->scale());
}

void Trainer::print_start() const {
  const auto& info = train_loader_->info();
  const auto& t = *train_loader_;
  std::string header = str(
      "ringtrain | ", comm_.size(), " rank(s) on ", comm_.node_count(), " node(s) | ",
      backend_->name(), " x ", threads_, " thread(s) per rank | ", cfg_.train.precision,
      backend_->instruction_set().empty() ? std::string() : " on " + backend_->instruction_set(),
      " | ", cfg_.comm.algorithm, " allreduce");
  log::info(deck_box(header, cfg_.effective_deck));
  log::info(str("threads: ", comm_.cpu_threads_description()));
  const std::string libraries = backend_->libraries();  // a GPU's: a few driver queries
  if (!libraries.empty()) log::info("libraries: " + libraries);
  log::info(str("data: ", info.dataset, " ", info.channels, "x", info.height, "x", info.width, ", ",
                info.classes, " classes; train ", t.sampler().samples(), " samples, ",
                steps_per_epoch_, " steps/epoch of ",
                accumulate_steps_ > 1 ? str(accumulate_steps_, " micro-batches x ") : std::string(),
                batch_per_rank_, " per rank x ", comm_.size(), " = ",
                int64_t(batch_per_rank_) * comm_.size() * accumulate_steps_, " global",
                t.sampler().unseen_per_epoch()
                    ? str(" (", t.sampler().unseen_per_epoch(), " dropped per epoch)")
                    : std::string()));
  log::info(str("model: ", model_->name(), ", ", model_->parameter_count(), " parameters, ",
                model_->train_flops_per_image() / 1e9, " GFLOP per training image; ",
                parallel_->engine().bucket_count(), " fusion bucket(s)"));
  if (scaler_)
    log::info(scaler_->dynamic()
                  ? str("loss scale: dynamic from ", scaler_->scale(), ", halved on overflow, ",
                        "doubled after ", cfg_.train.loss_scale_growth_interval, " clean steps")
                  : str("loss scale: static ", scaler_->scale()));
}

// ---- training ---------------------------------------------------------------------------

const backend::Tensor& Trainer::upload(const data::Batch& batch) {
  const auto& info = train_loader_->info();
  backend::Shape shape{batch.n, info.channels, info.height, info.width};
  if (input_.empty() || input_.shape() != shape) input_ = backend_->alloc(shape);
  backend_->upload(batch.images.data(), input_);
  return input_;
}

// One optimizer step: K micro-batches, each read, forwarded and backpropagated (gradients
// add up in the fusion buckets); the last one's backward reduces them, then the optimizer
// runs. Phases are summed over the micro-batches. False when the epoch has no step left.
bool Trainer::train_step(data::Loader& loader, StepTimes& t) {
  data::Batch& batch = batch_;
  pending_losses_.emplace_back();
  for (int micro = 0; micro < accumulate_steps_; ++micro) {
    double t0 = comm::fusion::Timeline::now();
    if (!loader.next(batch)) {
      // The sampler counts whole groups: an epoch never ends inside one.
      RT_CHECK(micro == 0, "the epoch ended after ", micro, " of ", accumulate_steps_,
               " micro-batches of an optimizer step");
      pending_losses_.pop_back();
      return false;
    }
    if (comm_.rank() == cfg_.train.straggler_rank)
      std::this_thread::sleep_for(
          std::chrono::duration<double, std::milli>(cfg_.train.straggler_ms));
    double t1 = comm::fusion::Timeline::now();
    timeline_->span("data", "step", t0, t1);
    t.data += t1 - t0;
    train_micro_step(batch, micro, t);
  }
  return true;
}

void Trainer::train_micro_step(const data::Batch& batch, int micro, StepTimes& t) {
  comm::fusion::Timeline& tl = *timeline_;
  double t0 = comm::fusion::Timeline::now();
  const backend::Tensor& x = upload(batch);
  model_->forward(x, true);
  const float smoothing = float(cfg_.train.label_smoothing);
  backend::PendingLoss loss =
      model_->loss_later(batch.labels.data(), loss_gradient_scale(), smoothing);
  if (inspect_) {
    // The heads' losses are known now; the class loss's numbers may still be on the device.
    const double heads = model_
                             ->inspect_loss(inspect_targets(batch, smoothing), inspect_weights(),
                                            loss_gradient_scale())
                             .weighted(inspect_weights());
    loss = backend::PendingLoss([loss, heads]() mutable {
      backend::LossResult r = loss.get();
      r.loss += heads;
      return r;
    });
  }
  pending_losses_.back().push_back(std::move(loss));
  double t1 = comm::fusion::Timeline::now();
  parallel_->backward(micro);
  double t2 = comm::fusion::Timeline::now();
  tl.span("forward", "step", t0, t1);
  tl.span("backward", "step", t1, t2);
  t.forward += t1 - t0;
  t.backward += t2 - t1;
  if (micro + 1 < accumulate_steps_) return;
  parallel_->synchronize();
  double t3 = comm::fusion::Timeline::now();
  if (step_is_taken()) {
    if (clipper_) clipper_->apply();
    optimizer_->step(schedule_->lr(global_step_));
    if (ema_) ema_->update();
  }
  backend_->synchronize();
  double t4 = comm::fusion::Timeline::now();
  tl.span("optimizer", "step", t3, t4);
  t.allreduce_wait = t3 - t2;
  t.optimizer = t4 - t3;
}

// The loss scale, or NaN where the RINGTRAIN_NONFINITE_AT test hook poisons this rank's step.
float Trainer::loss_gradient_scale() const {
  if (nonfinite_fault_at(global_step_ + 1, comm_.rank()))
    return std::numeric_limits<float>::quiet_NaN();
  return scaler_ ? float(scaler_->scale()) : 1.0f;
}

// Without loss scaling: after the allreduce every rank holds the same gradients, so every rank
// reaches the same verdict here without a message: a NaN or inf anywhere (a loss that
// overflowed on one rank spreads to all) goes to train.on_nonfinite.
bool Trainer::step_is_taken() {
  if (scaler_) return loss_scaled_step_is_taken();
  const nn::Parameter* bad = parallel_->first_nonfinite_gradient();
  return !bad || nonfinite_step_is_skipped(bad);
}

// With loss scaling the verdict is agreed (DataParallel::end_scaled_step). An overflow of a
// dynamic scale is normal: every rank skips the step and halves the scale, and
// train.on_nonfinite is not asked; a static scale, or a dynamic one already at its floor,
// cannot cure a NaN or inf, so on_nonfinite decides as without scaling.
bool Trainer::loss_scaled_step_is_taken() {
  enter_phase(Phase::kGradientCheck);
  const double scale = scaler_->scale();
  const nn::Parameter* bad = nullptr;
  const ScaleVerdict verdict = parallel_->end_scaled_step(*scaler_, &bad);
  if (verdict == ScaleVerdict::kStep) return true;
  if (verdict == ScaleVerdict::kNonfinite) return nonfinite_step_is_skipped(bad);
  if (comm_.rank() == 0)
    log::info(str("step ", global_step_ + 1, ": gradient overflow at loss scale ", scale,
                  "; the step is skipped on every rank, loss scale now ", scaler_->scale()));
  return false;
}

// A step whose reduced gradients hold a NaN or inf (bad: this rank's first such tensor, null
// when only another rank's were) stops the run on every rank before the weights take it,
// keeping the last checkpoint, or with train.on_nonfinite = skip skips this step's update.
bool Trainer::nonfinite_step_is_skipped(const nn::Parameter* bad) {
  const int64_t step = global_step_ + 1;
  const std::string what = bad ? "the gradient of " + bad->name : "a gradient on another rank";
  if (cfg_.train.on_nonfinite == "skip") {
    ++nonfinite_skipped_;
    if (comm_.rank() == 0)
      log::warn(str("step ", step, ": ", what,
                    " is not finite after the allreduce; the step is skipped on every rank "
                    "(train.on_nonfinite = skip)"));
    return false;
  }
  throw Error(str("step ", step, ": ", what,
                  " is not finite (NaN or inf) after the allreduce; stopped on every rank before "
                  "the weights took it, the last checkpoint is kept (lower train.lr, or set "
                  "train.on_nonfinite = skip)"));
}

// With train.conv_weight_grad or train.conv_algorithm = measure each rank timed its
// convolutions' paths or algorithms in its first step and may have chosen otherwise than rank 0:
// every rank now takes rank 0's choices, so that the ranks compute alike from here on and a
// checkpoint's choices (rank 0 writes them) are every rank's when a run resumes from it.
void Trainer::agree_weight_grad_choices() {
  weight_grads_agreed_ = true;
  if (cfg_.train.conv_weight_grad != "measure" && cfg_.train.conv_algorithm != "measure") return;
  const std::string mine = model_->weight_grad_choices();
  std::vector<uint8_t> bytes(mine.begin(), mine.end());
  comm_.broadcast(bytes, 0);
  const std::string rank0(bytes.begin(), bytes.end());
  if (rank0 != mine) model_->preset_weight_grad_choices(rank0, "rank 0's choices");
}

void Trainer::train_epoch(int epoch) {
  data::Loader& loader = *train_loader_;
  loader.start_epoch(epoch);
  Sums epoch_sums, interval;
  Stopwatch epoch_clock;
  size_t interval_first = phases_.steps();
  int64_t step = 0;
  // A resumed epoch skips the optimizer steps already taken: K micro-batches each.
  for (; step < skip_steps_; ++step)
    for (int micro = 0; micro < accumulate_steps_; ++micro) loader.next(batch_);
  skip_steps_ = 0;
  while (!stop_ && global_step_ < total_steps_) {
    double t0 = comm::fusion::Timeline::now();
    StepTimes t;
    if (!train_step(loader, t)) break;
    t.step = comm::fusion::Timeline::now() - t0;
    phases_.add(t);
    parallel_->end_step(t.step);  // collective: the autotune may switch settings here
    if (!weight_grads_agreed_) agree_weight_grad_choices();
    ++step;
    ++global_step_;
    if (flip_weight_fault_at(global_step_, comm_.rank()))
      log::warn(
          str("step ", global_step_, ": RINGTRAIN_FAULT ", flip_weight_bit(*model_, *backend_)));
    if (step % cfg_.train.log_interval == 0 || step == steps_per_epoch_) {
      settle_losses(epoch_sums, interval);
      log_interval(epoch, step, steps_per_epoch_, interval, interval_first);
      interval = Sums{};
      interval_first = phases_.steps();
    }
    if (checkpoint_->due(global_step_)) {
      enter_phase(Phase::kCheckpoint);
      save_checkpoint();
    } else if (weight_check_->due(global_step_)) {
      enter_phase(Phase::kWeightCheck);
      check_weights();
    }
    enter_phase(Phase::kStopCheck);
    stop_ = checkpoint_->stop_requested();
  }
  settle_losses(epoch_sums, interval);
  double seconds = epoch_clock.seconds();
  enter_phase(Phase::kMetrics);
  Sums total = reduce(epoch_sums);
  // Only a whole epoch averages the BN statistics: a run stopped inside one (max_steps, a
  // signal) checkpoints every rank's own, so its resume goes on as if never stopped.
  if (step == steps_per_epoch_) {
    enter_phase(Phase::kBatchNormAverage);
    comm::WatchedCollective watched(watch_);
    parallel_->average_bn_buffers();
  }
  Sums eval;
  if (eval_loader_) {
    Sums mine = evaluate(*eval_loader_);
    enter_phase(Phase::kEvaluation);
    eval = reduce(mine);
    if (inspect_) {
      val_outputs_ = gather_inspect_outputs();
      // Each epoch's figures at the threshold this epoch's model would be given.
      const float threshold =
          comm_.rank() == 0
              ? train::choose_pass_threshold(val_outputs_.pass_prob, val_outputs_.pass_truth,
                                             cfg_.model.false_accept_target)
              : 0.5f;
      report_inspect(cfg_.data.eval_split, val_outputs_, threshold);
    }
  }
  io::EpochRow row;
  row.epoch = epoch;
  row.steps = step;
  row.train_loss = total.count ? total.loss / total.count : kNaN;
  row.train_acc = total.count ? total.correct / total.count : kNaN;
  row.eval_loss = eval.count ? eval.loss / eval.count : kNaN;
  row.eval_acc = eval.count ? eval.correct / eval.count : kNaN;
  row.seconds = seconds;
  row.images_per_s = seconds > 0 ? total.count / seconds : 0;
  row.lr = schedule_->lr(std::max<int64_t>(global_step_ - 1, 0));
  const ClipFigures clip = clipper_ ? clipper_->take_epoch() : ClipFigures{kNaN, kNaN, 0, 0};
  const Sums averaged = ema_ && eval_loader_ ? evaluate_averages(step == steps_per_epoch_) : Sums{};
  row.ema_eval_loss = averaged.count ? averaged.loss / averaged.count : kNaN;
  row.ema_eval_acc = averaged.count ? averaged.correct / averaged.count : kNaN;
  row.grad_norm_mean = clip.mean_norm, row.grad_norm_max = clip.max_norm;
  row.clipped_steps = clip.clipped;
  epochs_.push_back(row);
  // Every convolution has decided its weight-gradient path (and its algorithm) by the end of
  // the run's first epoch.
  if (epoch == first_epoch_ &&
      (cfg_.train.conv_weight_grad != "onednn" || cfg_.train.conv_algorithm != "direct")) {
    const std::string choices = backend_->op_choices();
    const char* given = weight_grads_from_checkpoint_ ? ", as the checkpoint had them"
                        : !cfg_.train.conv_weight_grad_choices.empty() ? ", as the deck gave them"
                                                                       : "";
    if (!choices.empty()) log::info("rank 0: " + choices + given);
  }
  log::info(str("epoch ", epoch, " done in ", format_duration(seconds), " | train loss ",
                row.train_loss, " acc ", row.train_acc,
                eval_loader_ ? str(" | ", cfg_.data.eval_split, " loss ", row.eval_loss, " acc ",
                                   row.eval_acc)
                             : std::string(),
                " | ", int64_t(row.images_per_s), " img/s",
                clipper_ ? str(" | gradient norm ", clip.mean_norm, " mean, ", clip.max_norm,
                               " max, ", clip.clipped, " of ", clip.steps, " steps clipped")
                         : std::string(),
                averaged.count ? str(" | averaged weights: ", cfg_.data.eval_split, " loss ",
                                     row.ema_eval_loss, " acc ", row.ema_eval_acc)
                               : std::string()));
}

// The weight averages on the test split (what the model file gives predict), logged beside the
// weights' own figures and kept for the results file.
void Trainer::test_averages() {
  ema_->swap();
  Sums mine = evaluate(*test_loader_);
  enter_phase(Phase::kEvaluation);
  Sums test = reduce(std::move(mine));
  if (inspect_)
    report_inspect(cfg_.data.test_split + " (averaged weights)", gather_inspect_outputs(),
                   card_.pass_threshold);
  ema_->swap();
  if (test.count == 0) return;
  ema_test_ = {test.loss / test.count, test.correct / test.count};
  log::info(str(cfg_.data.test_split, " (averaged weights): loss ", ema_test_.first, " acc ",
                ema_test_.second));
}

// The weight averages on the eval split, swapped into the model and back. After a whole epoch
// their BN statistics are averaged across ranks as the weights' own were. With inspection
// heads their outputs are the ones the pass threshold is chosen on: the model file's averages
// are what predict runs.
Sums Trainer::evaluate_averages(bool whole_epoch) {
  ema_->swap();
  if (whole_epoch) {
    enter_phase(Phase::kBatchNormAverage);
    comm::WatchedCollective watched(watch_);
    parallel_->average_bn_buffers();
  }
  Sums mine = evaluate(*eval_loader_);
  enter_phase(Phase::kEvaluation);
  Sums all = reduce(mine);
  if (inspect_) val_outputs_ = gather_inspect_outputs();
  ema_->swap();
  return all;
}

// Each step's micro-batch losses summed as one step, then into both sums, in step order.
void Trainer::settle_losses(Sums& epoch, Sums& interval) {
  for (auto& step : pending_losses_) {
    Sums step_sums;
    for (backend::PendingLoss& loss : step) step_sums.add(loss.get());
    epoch.loss += step_sums.loss;
    epoch.correct += step_sums.correct;
    epoch.count += step_sums.count;
    interval.loss += step_sums.loss;
    interval.correct += step_sums.correct;
    interval.count += step_sums.count;
  }
  pending_losses_.clear();
}

void Trainer::log_interval(int epoch, int64_t step, int64_t steps, Sums& interval,
                           size_t first_step) {
  enter_phase(Phase::kMetrics);
  Sums all = reduce(interval);  // collective: every rank logs at the same steps
  StepTimes mean = phases_.mean(first_step, phases_.steps());
  Progress p;
  p.epoch = epoch;
  p.epochs = cfg_.train.epochs;
  p.step = step;
  p.steps = steps;
  p.loss = all.count ? all.loss / all.count : kNaN;
  p.acc = all.count ? all.correct / all.count : kNaN;
  p.images_per_s =
      mean.step > 0 ? double(batch_per_rank_) * comm_.size() * accumulate_steps_ / mean.step : 0;
  p.eta_s = mean.step * double(total_steps_ - global_step_);
  p.ms = {mean.data * 1e3,           mean.forward * 1e3,   mean.backward * 1e3,
          mean.allreduce_wait * 1e3, mean.optimizer * 1e3, mean.step * 1e3};
  log::info(progress_line(p));
}

Sums Trainer::evaluate(data::Loader& loader, bool confusion) {
  loader.start_epoch(0);
  Sums sums;
  const size_t classes = size_t(model_->classes());
  if (confusion) sums.confusion.assign(classes * classes, 0.0);
  data::Batch batch;
  eval_outputs_ = InspectOutputs{};
  while (loader.next(batch)) {
    if (views_.size() > 1) {
      evaluate_views(batch, sums);
      continue;
    }
    const backend::Tensor& logits = model_->forward(upload(batch), false);
    backend::LossResult loss = model_->loss(batch.labels.data());
    if (inspect_) {
      loss.loss += model_->inspect_loss(inspect_targets(batch, 0.0f), inspect_weights())
                       .weighted(inspect_weights());
      collect_inspect_outputs(batch);
    }
    sums.add(loss);
    if (confusion) count_predictions(logits, batch, sums);
  }
  return sums;
}

// data.tta: the batch's probabilities averaged over the views; the loss, accuracy, confusion
// and the heads' figures from the averages.
void Trainer::evaluate_views(const data::Batch& batch, Sums& sums) {
  const auto& info = train_loader_->info();
  const backend::Shape shape{batch.n, info.channels, info.height, info.width};
  const ViewProbabilities avg =
      average_over_views(*model_, *backend_, batch.images, shape, views_, input_);
  const int64_t classes = model_->classes();
  backend::LossResult r = loss_of_probabilities(avg.classes, batch.labels.data(), batch.n, classes);
  if (inspect_) {
    const nn::InspectTargets t = inspect_targets(batch, 0.0f);
    const nn::InspectLosses heads{bce_of_probabilities(avg.heads[0], t.defects),
                                  bce_of_probabilities(avg.heads[1], t.pass),
                                  bce_of_probabilities(avg.heads[2], t.zones)};
    r.loss += heads.weighted(inspect_weights());
    InspectOutputs& out = eval_outputs_;
    out.defect_prob.insert(out.defect_prob.end(), avg.heads[0].begin(), avg.heads[0].end());
    out.pass_prob.insert(out.pass_prob.end(), avg.heads[1].begin(), avg.heads[1].end());
    out.zone_prob.insert(out.zone_prob.end(), avg.heads[2].begin(), avg.heads[2].end());
    append_inspect_truths(batch);
  }
  sums.add(r);
  if (sums.confusion.empty()) return;
  for (int64_t i = 0; i < batch.n; ++i) {
    const double* row = avg.classes.data() + i * classes;
    const int64_t predicted = std::max_element(row, row + classes) - row;
    sums.confusion[size_t(batch.labels[size_t(i)] * classes + predicted)] += 1;
  }
}

void Trainer::count_predictions(const backend::Tensor& logits, const data::Batch& batch,
                                Sums& sums) {
  const size_t classes = size_t(model_->classes());
  std::vector<float> host(size_t(logits.numel()));
  backend_->download(logits, host.data());
  for (int i = 0; i < batch.n; ++i) {
    const float* row = host.data() + size_t(i) * classes;
    size_t predicted = size_t(std::max_element(row, row + classes) - row);
    sums.confusion[size_t(batch.labels[size_t(i)]) * classes + predicted] += 1;
  }
}

// Collective: the ranks' weight digests compared (train/weight_check.hpp); a divergence stops
// every rank together, or is repaired.
uint64_t Trainer::check_weights() {
  uint64_t digest = 0;
  fail_together(comm_, [&] { digest = weight_check_->run(global_step_); });
  return digest;
}

void Trainer::enter_phase(Phase phase) {
  const PhaseInfo& info = phase_info(phase);
  fault_point_for_rank(info.id, comm_.rank());
  if (watch_) watch_->set_phase(info.text, global_step_, info.io);
}

Sums Trainer::reduce(Sums s) const {
  double v[3] = {s.loss, s.correct, s.count};
  comm_.allreduce_sum(v, 3);
  if (!s.confusion.empty()) comm_.allreduce_sum(s.confusion.data(), s.confusion.size());
  return Sums{v[0], v[1], v[2], std::move(s.confusion)};
}

void Trainer::run() {
  set_up();
  print_start();
  phases_.reserve(size_t(total_steps_));
  for (int epoch = first_epoch_; epoch <= cfg_.train.epochs && !stop_; ++epoch) {
    if (global_step_ >= total_steps_) break;
    train_epoch(epoch);
  }
  // The last checkpoint is also the trained model, with the pass threshold chosen on val.
  if (inspect_ && !stop_) choose_pass_threshold();
  enter_phase(Phase::kCheckpoint);
  save_checkpoint();
  if (stop_) log::info(str("stopped by signal at step ", global_step_, "; resume with --resume"));
  double test_loss = kNaN, test_acc = kNaN;
  std::vector<double> confusion;
  if (test_loader_ && !stop_) {
    Sums mine = evaluate(*test_loader_, true);
    enter_phase(Phase::kEvaluation);
    Sums test = reduce(std::move(mine));
    confusion = test.confusion;
    if (test.count > 0) {
      test_loss = test.loss / test.count;
      test_acc = test.correct / test.count;
      log::info(str(cfg_.data.test_split, ": loss ", test_loss, " acc ", test_acc, " (",
                    int64_t(test.count), " samples)"));
      log::info(per_class_line(test.confusion, train_loader_->info().class_names));
    }
    if (inspect_)
      report_inspect(cfg_.data.test_split, gather_inspect_outputs(), card_.pass_threshold);
    if (ema_) test_averages();
  }
  enter_phase(Phase::kResults);
  fail_together(comm_, [&] { write_results(test_loss, test_acc, confusion); });
  if (timeline_->enabled()) {
    enter_phase(Phase::kTimeline);
    std::string path = cfg_.output.dir + "/" + cfg_.output.name + ".trace.json";
    // Its barrier, gathers and sends are collectives like the others: watched.
    comm::WatchedCollective watched(watch_);
    timeline_->write_chrome_trace(comm_, path);
    log::info(str("timeline: ", path, " (chrome://tracing or ui.perfetto.dev)"));
  }
}

backend::CudaOptions cuda_options(const TrainConfig& train, int device) {
  backend::CudaOptions options;
  options.device = device;
  options.precision = backend::parse_precision(train.precision);
  options.deterministic = train.deterministic;
  options.workspace_limit_mib = size_t(train.cudnn_workspace_mib);
  return options;
}

void train(const Config& config, comm::Communicator& comm) {
  Trainer trainer(config, comm);
  trainer.run();
}

}  // namespace ringtrain::train
