// data_parallel.cpp — the fusion engine bound to a model: bucket memory on the model's device,
// gradients planned in backward order and bound into their buckets, the backward hook.
#include "ringtrain/train/data_parallel.hpp"

#include <algorithm>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/parameter.hpp"

namespace ringtrain::train {
namespace {

// The fusion engine's buckets (where backward writes the gradients) in the backend's device
// memory, zeroed by its kernels; each bucket waits for a ready mark recorded when
// its last gradient was enqueued, because enqueue follows the *issue* of backward's kernels:
// on the reducer's stream where it reduces on one (NCCL: no host wait), else on the host.
comm::fusion::BufferOps device_buffer_ops(backend::Backend& be,
                                          comm::allreduce::Allreducer& reducer) {
  comm::fusion::BufferOps ops;
  ops.alloc = [&be](size_t bytes) {
    auto owner = std::make_shared<backend::Tensor>(be.alloc({int64_t(bytes / sizeof(float))}));
    return std::shared_ptr<float>(owner, owner->f32());
  };
  ops.zero = [&be](float* data, size_t count) {
    backend::Tensor t = backend::Tensor::view(data, {int64_t(count)});
    be.fill(t, 0.0f);
  };
  ops.mark_ready = [&be](size_t bucket) { be.record_ready(bucket); };
  ops.wait_ready = [&be, &reducer](size_t bucket) {
    const void* mark = be.ready_mark(bucket);
    if (mark == nullptr || !reducer.wait_on_device(mark)) be.wait_ready(bucket);
  };
  return ops;
}

}  // namespace

comm::fusion::AutotuneOptions autotune_options(const CommConfig& comm, int64_t run_steps) {
  comm::fusion::AutotuneOptions options;
  const std::optional<bool> overlap = fixed_overlap(comm);
  const std::optional<double> fusion_mib = fixed_fusion_mib(comm);
  options.search_overlap = !overlap;
  options.search_fusion = !fusion_mib;
  if (overlap) options.start.overlap = *overlap;
  if (fusion_mib) options.start.fusion_mib = *fusion_mib;
  options.run_steps = run_steps;
  return options;
}

comm::fusion::FusionOptions engine_options(const CommConfig& comm) {
  const comm::fusion::TuneSettings start = autotune_options(comm, 0).start;
  comm::fusion::FusionOptions options;
  options.fusion_mib = start.fusion_mib;
  options.overlap = start.overlap;
  options.first_bucket_mib = comm.first_bucket_mib;
  options.stall_timeout_s = comm.stall_timeout_s;
  options.local_gate = comm.local_gate;
  return options;
}

DataParallel::DataParallel(const comm::Communicator& comm, nn::Model& model,
                           backend::Backend& backend, comm::allreduce::Allreducer& grad_reducer,
                           comm::allreduce::Allreducer& stat_reducer,
                           comm::fusion::FusionOptions options, comm::fusion::Timeline* timeline,
                           int accumulate_steps)
    : comm_(comm),
      model_(model),
      backend_(backend),
      stat_reducer_(stat_reducer),
      world_size_(comm.size()),
      accumulate_steps_(accumulate_steps) {
  RT_REQUIRE_INPUT(accumulate_steps >= 1, "train.accumulate_steps = ", accumulate_steps,
                   ": must be an integer >= 1");
  // On a GPU the gradients stay in device memory; the CPU backends keep the host defaults.
  comm::allreduce::Allreducer* reducer = &grad_reducer;
  if (backend_.name() == "cuda") {
    options.buffer_ops = device_buffer_ops(backend_, grad_reducer);
  } else {
    // On one node the buckets live in memory the node's ranks share, and the reducer reads
    // its peers' copies in place (collective: every rank plans at the same point).
    options.buffer_ops.alloc = [reducer, host = options.buffer_ops.alloc](size_t bytes) {
      std::shared_ptr<float> shared = reducer->shared_buffers(bytes);
      return shared ? shared : host(bytes);
    };
  }
  // A reduction stuck on a device gives up, and says why, when the stall watchdog fires.
  options.on_stall = [reducer] { return reducer->on_stall(); };
  // A reduction that moves bytes, however slowly, is not a stall.
  options.progress = [reducer] { return reducer->progress(); };
  // The engine divides by the world size; the buckets hold the sum of K micro-batches too,
  // scaled by the loss scale, and one division by world x K x scale rounds once, like the mean
  // of a single unscaled batch (a power-of-two scale leaves every bit as without it).
  const double micro_batches = double(accumulate_steps);
  engine_ = std::make_unique<comm::fusion::FusionEngine>(
      comm,
      [this, reducer, micro_batches](float* data, size_t count, float divisor) {
        const double unscale = micro_batches * loss_scale_.load(std::memory_order_relaxed);
        reducer->sum_and_divide(data, count, float(double(divisor) * unscale));
      },
      options, timeline);
  grad_reducer.set_spin_hint(engine_->main_thread_waiting());
  bind_gradients();
}

DataParallel::~DataParallel() = default;

// Gradients live in the engine's buckets, in the order backward completes them.
void DataParallel::bind_gradients() {
  const auto& params = model_.parameters();
  const std::vector<size_t>& order = model_.backward_order();
  std::vector<comm::fusion::GradSpec> specs;
  for (size_t index : order) specs.push_back({params[index]->name + ".grad", params[index]->shape});
  std::vector<float*> slots = engine_->plan(specs);
  slot_of_param_.assign(params.size(), 0);
  for (size_t k = 0; k < slots.size(); ++k) {
    params[order[k]]->bind_grad(slots[k]);
    slot_of_param_[order[k]] = k;
  }
}

void DataParallel::backward(int micro) {
  RT_CHECK(micro >= 0 && micro < accumulate_steps_, "DataParallel::backward: micro-batch ", micro,
           " of ", accumulate_steps_);
  const bool accumulate = micro > 0;
  if (micro + 1 < accumulate_steps_) {
    model_.backward({}, accumulate);
    return;
  }
  model_.backward([this](size_t index) { engine_->enqueue(slot_of_param_[index]); }, accumulate);
}

void DataParallel::synchronize() {
  engine_->synchronize();
}

// Fusion sizes that lay this model's gradients out in the same buckets as the start, or as a
// size kept before them, would time the same program twice: left out, and said so.
comm::fusion::AutotuneOptions DataParallel::without_same_layouts(
    comm::fusion::AutotuneOptions options) const {
  if (!options.search_fusion) return options;
  std::vector<std::vector<size_t>> seen{engine_->bucket_bytes_for(options.start.fusion_mib)};
  std::vector<double> kept;
  std::string same;
  for (double mib : options.fusion_candidates_mib) {
    std::vector<size_t> layout = engine_->bucket_bytes_for(mib);
    if (std::find(seen.begin(), seen.end(), layout) == seen.end()) {
      seen.push_back(std::move(layout));
      kept.push_back(mib);
    } else {
      same += str(same.empty() ? "" : ", ", mib, " MiB");
    }
  }
  if (!same.empty())
    options.note = str("fusion ", same, " not tried (the same buckets as a size tried)");
  options.fusion_candidates_mib = kept;
  options.search_fusion = !kept.empty();
  return options;
}

void DataParallel::start_autotune(const comm::fusion::AutotuneOptions& options,
                                  const comm::fusion::TuneSettings* chosen) {
  tuner_ = std::make_unique<comm::fusion::Autotuner>(comm_, without_same_layouts(options));
  if (chosen) {
    // A knob the deck fixes keeps the deck's value even when the checkpoint chose another.
    comm::fusion::TuneSettings s = options.start;
    if (options.search_overlap) s.overlap = chosen->overlap;
    if (options.search_fusion) s.fusion_mib = chosen->fusion_mib;
    tuner_->adopt(s);
  }
  const comm::fusion::TuneSettings s = tuner_->settings();
  engine_->retune(s.overlap, s.fusion_mib);
  if (!tuner_->searching()) log::info(tuner_->summary_line());
}

void DataParallel::end_step(double step_seconds) {
  if (!tuner_ || !tuner_->searching()) return;
  if (tuner_->step_done(step_seconds)) {
    const comm::fusion::TuneSettings s = tuner_->settings();
    engine_->retune(s.overlap, s.fusion_mib);
  }
  if (!tuner_->searching()) log::info(tuner_->summary_line());
}

const comm::fusion::TuneSettings* DataParallel::tuned_choice() const {
  if (!tuner_ || tuner_->searching()) return nullptr;
  const comm::fusion::AutotuneReport& r = tuner_->report();
  return r.source == "search" || r.source == "checkpoint" ? &r.chosen : nullptr;
}

void DataParallel::set_loss_scale(double scale) {
  RT_CHECK(scale > 0, "DataParallel::set_loss_scale: scale ", scale);
  // Relaxed: the engine's hand-over of the next step's buckets orders this before their reads.
  loss_scale_.store(scale, std::memory_order_relaxed);
}

// One question for every gradient: on a GPU one flag copy and one wait a step, not one a tensor.
const nn::Parameter* DataParallel::first_nonfinite_gradient() const {
  const auto& params = model_.parameters();
  std::vector<const backend::Tensor*> grads;
  grads.reserve(params.size());
  for (const nn::Parameter* p : params) grads.push_back(&p->grad);
  const size_t bad = backend_.first_nonfinite(grads);
  return bad < params.size() ? params[bad] : nullptr;
}

ScaleVerdict DataParallel::end_scaled_step(LossScaler& scaler, const nn::Parameter** first_bad) {
  const nn::Parameter* bad = first_nonfinite_gradient();
  if (first_bad) *first_bad = bad;
  const ScaleVerdict verdict = scaler.update(comm_.all_ok(bad == nullptr));
  set_loss_scale(scaler.scale());
  return verdict;
}

void DataParallel::average_bn_buffers() {
  if (world_size_ == 1) return;
  std::vector<float> host;
  for (const auto& buffer : model_.buffers()) {
    backend::Tensor& t = *buffer.tensor;
    host.resize(size_t(t.numel()));
    backend_.download(t, host.data());
    stat_reducer_.sum(host.data(), host.size());
    for (float& v : host) v /= float(world_size_);
    backend_.upload(host.data(), t);
  }
}

}  // namespace ringtrain::train
