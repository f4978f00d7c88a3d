// trainer_run.hpp — the Trainer of one run (private to train/): its state and steps, defined in
// trainer.cpp (set-up and the training loop), trainer_inspect.cpp (the inspection heads) and
// trainer_results.cpp (the results file).
#pragma once

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
#include "ringtrain/train/trainer.hpp"
#include "ringtrain/train/view_average.hpp"
#include "ringtrain/train/weight_check.hpp"

namespace ringtrain::train {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Loss and accuracy sums over some batches of this rank (reduced across ranks to report).
struct Sums {
  double loss = 0;  // sum over samples
  double correct = 0;
  double count = 0;
  std::vector<double> confusion;  // [true class][predicted class], when asked for
  void add(const backend::LossResult& r) {
    loss += r.loss * double(r.count);
    correct += double(r.correct);
    count += double(r.count);
  }
};

class Trainer {
 public:
  Trainer(const Config& config, comm::Communicator& comm) : cfg_(config), comm_(comm) {}
  void run();

 private:
  void set_up();
  void watch_set_up();
  void fail_together_watched(const std::function<void()>& phase);
  void open_data();
  void build_model();
  void check_batch_memory() const;
  void check_batch_fits_split(int64_t samples, data::Remainder remainder) const;
  void build_comm();
  void build_optimizer();
  void build_loss_scaler();
  float loss_gradient_scale() const;
  bool step_is_taken();
  bool loss_scaled_step_is_taken();
  void print_start() const;
  void train_epoch(int epoch);
  bool train_step(data::Loader& loader, StepTimes& t);
  void train_micro_step(const data::Batch& batch, int micro, StepTimes& t);
  void settle_losses(Sums& epoch, Sums& interval);
  void log_interval(int epoch, int64_t step, int64_t steps, Sums& interval, size_t first_step);
  Sums evaluate(data::Loader& loader, bool confusion = false);
  Sums evaluate_averages(bool whole_epoch);
  void evaluate_views(const data::Batch& batch, Sums& sums);
  void test_averages();
  nn::InspectTargets inspect_targets(const data::Batch& batch, float smoothing);
  nn::InspectWeights inspect_weights() const;
  void collect_inspect_outputs(const data::Batch& batch);
  void append_inspect_truths(const data::Batch& batch);
  InspectOutputs gather_inspect_outputs();
  void report_inspect(const std::string& split, const InspectOutputs& all, float threshold);
  void choose_pass_threshold();
  io::ModelCard model_card() const;
  void count_predictions(const backend::Tensor& logits, const data::Batch& batch, Sums& sums);
  Sums reduce(Sums s) const;
  void enter_phase(Phase phase);
  void agree_weight_grad_choices();
  bool nonfinite_step_is_skipped(const nn::Parameter* bad);
  const backend::Tensor& upload(const data::Batch& batch);
  void write_results(double test_loss, double test_acc, const std::vector<double>& confusion);
  uint64_t check_weights();
  void save_checkpoint() {
    // In the checkpoint's phase (callers entered it): the check is part of writing one.
    checkpoint_->set_weights_digest(digest_hex(check_weights()),
                                    weight_check_->covers_bn_statistics());
    checkpoint_->save(*model_, *optimizer_, global_step_, card_, scaler_.get(),
                      parallel_->tuned_choice(), ema_.get());
    weight_check_->set_checkpoint_step(global_step_);
  }

  const Config& cfg_;
  comm::Communicator& comm_;
  int batch_per_rank_ = 0;
  int accumulate_steps_ = 1;  // micro-batches per optimizer step
  int threads_ = 1;
  int cuda_device_ = -1;  // the cuda backend's device; -1: the gradients are in host memory
  std::unique_ptr<data::Loader> train_loader_, eval_loader_, test_loader_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<comm::allreduce::Allreducer> grad_reducer_, stat_reducer_;
  std::unique_ptr<comm::fusion::Timeline> timeline_;
  std::unique_ptr<DataParallel> parallel_;
  // The watchdog of the set-up, until the engine's exists (then dropped at the end of set-up).
  std::unique_ptr<comm::fusion::PhaseWatch> setup_watch_;
  // The job's one stall watchdog (the fusion engine's), told of every collective; the
  // registration with the communicator ends before the engine (and the set-up's) goes.
  comm::StallWatch* watch_ = nullptr;
  struct WatchRegistration {
    const comm::Communicator* comm = nullptr;
    ~WatchRegistration() {
      if (comm) comm->set_stall_watch(nullptr);
    }
  } watch_registration_;
  std::unique_ptr<nn::Optimizer> optimizer_;
  std::unique_ptr<GradientClipper> clipper_;        // null: train.clip_norm = 0
  std::unique_ptr<nn::WeightAverage> ema_;          // null: train.ema_decay = 0
  std::vector<data::AugmentParams> views_;          // data.tta: the views evaluation averages
  std::pair<double, double> ema_test_{kNaN, kNaN};  // the averages' test loss and accuracy
  std::unique_ptr<nn::LRSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;  // null: train.loss_scale = none
  std::unique_ptr<CheckpointState> checkpoint_;
  // Every comm.verify_every steps and before each checkpoint: the ranks hold the same model.
  std::unique_ptr<WeightCheck> weight_check_;
  io::ModelCard card_;           // what the checkpoint carries for inference
  bool inspect_ = false;         // model.heads = inspect
  std::vector<float> targets_;   // one batch's inspection targets: defects, pass, zones
  InspectOutputs eval_outputs_;  // this rank's, during an evaluation with inspection heads
  InspectOutputs val_outputs_;   // rank 0: every rank's of the last evaluation of eval_split
  std::vector<io::InspectFigures> inspect_figures_;  // for the results file
  std::unordered_map<const std::string*, std::pair<const char*, const char*>> layer_names_;
  backend::Tensor input_;
  data::Batch batch_;  // the micro-batch being trained on; its memory is reused
  // The losses of the steps since the last log line, one list of micro-batches per step:
  // read (waiting for the device) only when a line or the epoch's row needs them.
  std::vector<std::vector<backend::PendingLoss>> pending_losses_;
  PhaseLog phases_;
  std::vector<io::EpochRow> epochs_;
  std::string start_time_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, global_step_ = 0;
  int first_epoch_ = 1;
  int64_t skip_steps_ = 0;         // of first_epoch_, already done before a resume
  int64_t nonfinite_skipped_ = 0;  // steps skipped for a non-finite gradient (on_nonfinite)
  bool stop_ = false;
  bool weight_grads_agreed_ = false;  // agree_weight_grad_choices ran after the first step
  bool weight_grads_from_checkpoint_ = false;  // a resume preset the timed paths
};

}  // namespace ringtrain::train
