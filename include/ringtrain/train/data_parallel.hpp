// data_parallel.hpp — DataParallel: the one owner of what binds a model to the fusion engine
// (the gradient schedule, gradients bound into bucket memory, the backward hook, the step's
// synchronisation, the batch-norm buffer average).
//
// Like PyTorch's Reducer, it alone maps parameters to bucket slots. The trainer and the
// data-parallel tests use it, so the tests cover the trainer's binding.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/comm/fusion/autotune.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/train/loss_scale.hpp"

namespace ringtrain::backend {
class Backend;
}
namespace ringtrain::nn {
class Model;
struct Parameter;
}  // namespace ringtrain::nn
namespace ringtrain::comm {
class Communicator;
}
namespace ringtrain::comm::allreduce {
class Allreducer;
}

namespace ringtrain::train {

// The autotune of a run from the deck: comm.overlap and comm.fusion_mib searched where auto,
// fixed where the deck or the command line gives a value; run_steps: the steps left to train.
comm::fusion::AutotuneOptions autotune_options(const CommConfig& comm, int64_t run_steps);

// The fusion engine's options from the deck: comm.first_bucket_mib, stall_timeout_s, local_gate,
// and the autotune's start settings (autotune_options().start) for overlap and fusion_mib.
comm::fusion::FusionOptions engine_options(const CommConfig& comm);

class DataParallel {
 public:
  // Collective over comm. Makes the fusion engine over comm with `options` (bucket memory on
  // the device for the cuda backend), plans every parameter's gradient in the order backward
  // completes them (named "<parameter>.grad"), and points each parameter's gradient at its
  // place in a bucket. grad_reducer reduces the buckets (its spin hint is wired to the
  // engine); stat_reducer sums the batch-norm buffers. An optimizer step runs
  // accumulate_steps (K) micro-batches, and the buckets end up with the mean over ranks and
  // micro-batches (divided by world size x K). model, backend, both reducers and the timeline
  // (may be null) must outlive this object.
  DataParallel(const comm::Communicator& comm, nn::Model& model, backend::Backend& backend,
               comm::allreduce::Allreducer& grad_reducer, comm::allreduce::Allreducer& stat_reducer,
               comm::fusion::FusionOptions options, comm::fusion::Timeline* timeline = nullptr,
               int accumulate_steps = 1);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // model.backward() of micro-batch `micro` (0..K-1) of an optimizer step. The first overwrites
  // the gradients, the later ones add to them in their buckets; only the last hands each
  // gradient to the engine the moment it is final, so the engine reduces (overlapped with
  // that backward) once per optimizer step and launches nothing on the micro-batches before.
  void backward(int micro = 0);
  // Blocks until every bucket of the step holds the mean over ranks (see FusionEngine).
  void synchronize();

  // Loss scaling: backward's gradients are `scale` times the true ones (Model::loss scaled the
  // loss gradient). The reductions from the next step on divide it out in the same division
  // as the mean (world size x K x scale: no extra pass, and exact for a power of two), so after
  // synchronize() the buckets hold the true mean. 1 (the default): no scaling.
  void set_loss_scale(double scale);
  // This rank's first parameter whose reduced gradient holds a NaN or inf; null when none.
  const nn::Parameter* first_nonfinite_gradient() const;
  // Collective, after synchronize(), with loss scaling: whether every rank's reduced gradients
  // are finite, agreed by a one-flag allreduce (not left to every allreducer returning bitwise
  // equal sums: a split verdict would split the weights and the scales for good); the scaler
  // takes the verdict and the next step unscales by its new scale. *first_bad: as
  // first_nonfinite_gradient() (null when only another rank's were not finite).
  ScaleVerdict end_scaled_step(LossScaler& scaler, const nn::Parameter** first_bad = nullptr);
  // Per-rank batch norm leaves each rank its own running statistics; evaluation and the saved
  // model use their mean over ranks. Collective; nothing to do on one rank.
  void average_bn_buffers();

  // The engine's overlap and fusion size from the autotune (comm/fusion/autotune.hpp): from
  // options.start, searched over the knobs it names. chosen: a choice recorded earlier (a
  // checkpoint), applied now for the knobs searched, and no search. Call before the first step.
  void start_autotune(const comm::fusion::AutotuneOptions& options,
                      const comm::fusion::TuneSettings* chosen = nullptr);
  // Collective, after each optimizer step (synchronize() done): the step's time on this rank.
  // The autotune may switch the engine's settings here, on every rank at this step; rank 0
  // logs the choice when the search ends.
  void end_step(double step_seconds);
  // Null without start_autotune().
  const comm::fusion::Autotuner* autotuner() const { return tuner_.get(); }
  // The choice a checkpoint keeps: made by a search or adopted from a checkpoint; else null.
  const comm::fusion::TuneSettings* tuned_choice() const;

  const comm::fusion::FusionEngine& engine() const { return *engine_; }

 private:
  void bind_gradients();
  comm::fusion::AutotuneOptions without_same_layouts(comm::fusion::AutotuneOptions options) const;

  const comm::Communicator& comm_;
  nn::Model& model_;
  backend::Backend& backend_;
  comm::allreduce::Allreducer& stat_reducer_;
  int world_size_;
  int accumulate_steps_;
  std::unique_ptr<comm::fusion::FusionEngine> engine_;
  std::unique_ptr<comm::fusion::Autotuner> tuner_;
  std::vector<size_t> slot_of_param_;  // parameter index -> the engine's gradient slot
  // Set between steps, read by the engine's thread as it reduces.
  std::atomic<double> loss_scale_{1.0};
};

}  // namespace ringtrain::train
