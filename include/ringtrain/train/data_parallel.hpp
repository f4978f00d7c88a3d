// data_parallel.hpp — DataParallel: the one owner of what binds a model to the fusion engine
// (the gradient schedule, gradients bound into bucket memory, the backward hook, the step's
// synchronisation, the batch-norm buffer average).
//
// Like PyTorch's Reducer, it alone maps parameters to bucket slots. The trainer and the
// data-parallel tests use it, so the tests cover the trainer's binding.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/comm/fusion/fusion_engine.hpp"

namespace ringtrain::backend {
class Backend;
}
namespace ringtrain::nn {
class Model;
}
namespace ringtrain::comm {
class Communicator;
}
namespace ringtrain::comm::allreduce {
class Allreducer;
}

namespace ringtrain::train {

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
  // Per-rank batch norm leaves each rank its own running statistics; evaluation and the saved
  // model use their mean over ranks. Collective; nothing to do on one rank.
  void average_bn_buffers();

  const comm::fusion::FusionEngine& engine() const { return *engine_; }

 private:
  void bind_gradients();

  nn::Model& model_;
  backend::Backend& backend_;
  comm::allreduce::Allreducer& stat_reducer_;
  int world_size_;
  int accumulate_steps_;
  std::unique_ptr<comm::fusion::FusionEngine> engine_;
  std::vector<size_t> slot_of_param_;  // parameter index -> the engine's gradient slot
};

}  // namespace ringtrain::train
