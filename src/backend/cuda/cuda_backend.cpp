// cuda_backend.cpp — the CUDA backend: allocation from the pool, transfers on the compute
// stream (uploads through pinned, double-buffered staging), the loss (read later, through
// pinned memory), SGD, elementwise ops and the non-finite check on our kernels; layer ops in
// conv_linear.cpp and norm_pool.cpp.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "../factories.hpp"
#include "captured_work.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

using ReadyEvent = SyncEvent;

// Host-to-device copies of pageable memory through two pinned buffers used in turn: the
// caller's memory is copied into one (a host memcpy) and the DMA from it is queued, so
// copy_to_device returns before the transfer ends, and the next copy fills the other
// buffer while this one may still be in flight. A buffer is refilled only after the event
// of its last transfer (so two transfers in flight never share one). While a graph records
// (`recorded` set), the copy comes from a buffer of its own, kept with the graph: every replay
// copies these values again, and no later copy may refill that buffer.
class HostStaging {
 public:
  void copy_to_device(const void* host, void* device, size_t bytes, cudaStream_t stream,
                      std::vector<std::shared_ptr<void>>* recorded) {
    if (recorded != nullptr) {
      auto buffer = std::make_shared<PinnedBuffer>(bytes);
      std::memcpy(buffer->get(), host, bytes);
      CUDA_CHECK(cudaMemcpyAsync(device, buffer->get(), bytes, cudaMemcpyHostToDevice, stream));
      recorded->push_back(std::move(buffer));
      return;
    }
    Slot& slot = slots_[next_];
    next_ = 1 - next_;
    if (slot.in_flight) CUDA_CHECK(cudaEventSynchronize(slot.done.get()));
    slot.in_flight = false;
    if (slot.buffer.bytes() < bytes) slot.buffer = PinnedBuffer(bytes);
    std::memcpy(slot.buffer.get(), host, bytes);
    CUDA_CHECK(cudaMemcpyAsync(device, slot.buffer.get(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(slot.done.get(), stream));
    slot.in_flight = true;
  }

 private:
  struct Slot {
    PinnedBuffer buffer;
    SyncEvent done;
    bool in_flight = false;
  };
  Slot slots_[2];
  int next_ = 0;
};

// Where one batch's loss totals land on the host, and the event after their copy.
struct LossSlot {
  PinnedBuffer totals{2 * sizeof(double)};
  SyncEvent copied;
};

// One result per tensor, gathered with one copy: device slots, their pinned copy, and the
// conversion scratch for tensors that are not plain fp32 (CudaBackend::per_tensor_results).
struct TensorResults {
  std::shared_ptr<void> device;
  PinnedBuffer host;
  Tensor f32;
};

bool same_table(const std::vector<kernels::SgdSegment>& a,
                const std::vector<kernels::SgdSegment>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
           return x.w == y.w && x.g == y.g && x.buf == y.buf && x.count == y.count &&
                  x.weight_decay == y.weight_decay;
         });
}

void check_same_numel(const char* op, const Tensor& a, const Tensor& b) {
  RT_CHECK(a.numel() == b.numel(), op, ": tensors ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), " differ in size");
}

kernels::Rule kernel_rule(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kLars:
      return kernels::Rule::kLars;
    case UpdateRule::kLamb:
      return kernels::Rule::kLamb;
    case UpdateRule::kAdamW:
      break;
  }
  return kernels::Rule::kAdamW;
}

// Device memory from the pool, grown on demand and reused by every call (stream order keeps
// the calls apart).
class ScratchBlock {
 public:
  void* reserve(DevicePool& pool, size_t bytes) {
    if (bytes_ < bytes) {
      block_ = pool.allocate(bytes);
      bytes_ = bytes;
    }
    return block_.get();
  }

 private:
  std::shared_ptr<void> block_;
  size_t bytes_ = 0;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : ctx_(options) {}
  ~CudaBackend() override {
    (void)cudaSetDevice(ctx_.device());  // a destructor never throws
    // Queued work may still read pool blocks the members below give back.
    (void)cudaStreamSynchronize(ctx_.stream());
  }

  std::string name() const override { return "cuda"; }
  std::string libraries() const override { return library_versions(ctx_.device()); }
  std::string op_choices() const override {
    std::string choices;
    auto say = [&](const char* what, const Context::FusionCount& n) {
      if (n.fused + n.separate == 0) return;
      choices +=
          str(choices.empty() ? "" : "; ", what, ": fused ", n.fused, ", separate ", n.separate);
    };
    say("batch norm + ReLU", ctx_.bn_relu_count());
    say("batch norm + residual + ReLU", ctx_.bn_add_relu_count());
    say("conv + bias + ReLU", ctx_.conv_relu_count());
    return choices;
  }
  MemoryUse memory_use() const override {
    const DevicePool& pool = ctx_.pool();
    MemoryUse use;
    use.in_use = pool.bytes_requested_in_use();
    use.peak = pool.peak_bytes_requested();
    use.device = true;
    use.block_peak = pool.peak_bytes_in_use();
    use.workspace_peak = ctx_.workspace_peak();
    use.at_peak = pool.requested_at_peak();
    return use;
  }
  void reset_memory_peak() override {
    ctx_.pool().reset_peak();
    ctx_.reset_workspace_peak();
  }
  bool recycles_memory() const override { return true; }
  // cuDNN's conv + bias + activation kernel adds a residual (its z) in the same pass.
  bool fuses_conv_residual() const override { return true; }
  int threads() const override { return 1; }
  Precision precision() const override { return ctx_.precision(); }

  Tensor alloc(const Shape& shape, DType dtype) override { return ctx_.alloc(shape, dtype); }

  // Returns once the values are in pinned staging (the caller may reuse its memory); the
  // transfer itself is queued on the compute stream, ahead of the ops that read t.
  void upload(const float* host, Tensor& t) override {
    ctx_.activate();
    expect_present(t, "upload target");
    const size_t bytes = size_t(t.numel()) * sizeof(float);
    if (t.dtype() == DType::kF32 && t.is_plain()) {
      upload_staging_.copy_to_device(host, t.raw(), bytes, ctx_.stream(), recorded_);
      return;
    }
    ctx_.ensure(upload_f32_, t.shape());
    upload_staging_.copy_to_device(host, upload_f32_.raw(), bytes, ctx_.stream(), recorded_);
    ctx_.convert(upload_f32_, t);
  }

  // Any type and order to host fp32 in plain order.
  void download(const Tensor& t, float* host) override {
    ctx_.activate();
    const Tensor& plain = ctx_.as_plain_f32(t, download_f32_);
    CUDA_CHECK(cudaMemcpyAsync(host, plain.raw(), size_t(plain.numel()) * sizeof(float),
                               cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  }

  void synchronize() override {
    ctx_.activate();
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override { return cuda::make_conv(ctx_, s); }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return cuda::make_linear(ctx_, s);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return cuda::make_batch_norm(ctx_, s);
  }
  std::unique_ptr<ReluOp> make_relu() override { return cuda::make_relu(ctx_); }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override { return cuda::make_pool(ctx_, s); }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override {
    return cuda::make_add(ctx_, fuse_relu);
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& dlogits,
                                   float smoothing) override {
    return softmax_cross_entropy_later(logits, labels, dlogits, smoothing).get();
  }

  // Labels go up through pinned staging; the kernel writes dlogits and per-row results,
  // one block sums them into two doubles, and those are copied to a pinned slot behind an
  // event: nothing here waits for the device.
  PendingLoss softmax_cross_entropy_later(const Tensor& logits_in, const int32_t* labels,
                                          Tensor& dlogits, float smoothing) override {
    ctx_.activate();
    expect_present(logits_in, "loss logits");
    RT_CHECK(logits_in.rank() == 2, "loss: logits must be [N, classes]");
    const int64_t n = logits_in.dim(0), classes = logits_in.dim(1);
    for (int64_t i = 0; i < n; ++i)
      RT_CHECK(labels[i] >= 0 && labels[i] < classes, "label ", labels[i], " of image ", i,
               " is outside [0, ", classes, ")");
    const Tensor& logits = ctx_.as_plain_f32(logits_in, logits_f32_);
    ctx_.ensure(dlogits, logits.shape());
    // One block, reused by every call (stream order keeps calls apart): totals, per-row
    // losses, labels in, correct flags out.
    const size_t bytes = size_t(n + 2) * sizeof(double) + 2 * size_t(n) * sizeof(int32_t);
    auto* totals = static_cast<double*>(loss_scratch_.reserve(ctx_.pool(), bytes));
    double* row_loss = totals + 2;
    auto* device_labels = reinterpret_cast<int32_t*>(row_loss + n);
    int32_t* row_correct = device_labels + n;
    label_staging_.copy_to_device(labels, device_labels, size_t(n) * sizeof(int32_t), ctx_.stream(),
                                  recorded_);
    kernels::softmax_cross_entropy(logits.f32(), device_labels, n, classes, smoothing,
                                   dlogits.f32(), row_loss, row_correct, ctx_.stream());
    kernels::loss_totals(row_loss, row_correct, n, totals, ctx_.stream());
    // A recorded loss lands in a slot of the graph's own, which its replays write again.
    std::shared_ptr<LossSlot> slot = recorded_ ? std::make_shared<LossSlot>() : free_loss_slot();
    if (recorded_) recorded_->push_back(slot);
    CUDA_CHECK(cudaMemcpyAsync(slot->totals.get(), totals, 2 * sizeof(double),
                               cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaEventRecord(slot->copied.get(), ctx_.stream()));
    // An event recorded in a capture cannot be waited for, and the replays do not record it.
    if (recorded_)
      return PendingLoss([]() -> LossResult {
        throw Error(
            "cuda backend: the loss of a recorded step is not read back (Backend::capture); "
            "time the replays, or run the steps whose loss is wanted eagerly");
      });
    return PendingLoss([slot, n] {
      CUDA_CHECK(cudaEventSynchronize(slot->copied.get()));
      const auto* host = static_cast<const double*>(slot->totals.get());
      LossResult result;
      result.count = n;
      result.loss = n > 0 ? host[0] / double(n) : 0.0;
      result.correct = int64_t(host[1]);
      return result;
    });
  }

  // Targets go up with the values' losses in one scratch block; the total comes back at once
  // (the heads' losses are small and read every step anyway).
  double sigmoid_binary_cross_entropy(const Tensor& logits_in, const float* targets,
                                      float grad_weight, Tensor& dlogits) override {
    ctx_.activate();
    expect_present(logits_in, "bce logits");
    RT_CHECK(logits_in.rank() == 2, "bce: logits must be [N, K]");
    const int64_t count = logits_in.numel();
    for (int64_t i = 0; i < count; ++i)
      RT_CHECK(targets[i] >= 0 && targets[i] <= 1, "binary target ", targets[i], " of value ", i,
               " is outside [0, 1]");
    const Tensor& logits = ctx_.as_plain_f32(logits_in, bce_logits_f32_);
    ctx_.ensure(dlogits, logits.shape());
    const size_t bytes = size_t(count + 1) * sizeof(double) + size_t(count) * sizeof(float);
    auto* total = static_cast<double*>(bce_scratch_.reserve(ctx_.pool(), bytes));
    double* value_loss = total + 1;
    auto* device_targets = reinterpret_cast<float*>(value_loss + count);
    CUDA_CHECK(cudaMemcpyAsync(device_targets, targets, size_t(count) * sizeof(float),
                               cudaMemcpyHostToDevice, ctx_.stream()));
    kernels::sigmoid_binary_cross_entropy(logits.f32(), device_targets, count, grad_weight,
                                          dlogits.f32(), value_loss, total, ctx_.stream());
    double host_total = 0;
    if (count > 0)
      CUDA_CHECK(cudaMemcpyAsync(&host_total, total, sizeof(double), cudaMemcpyDeviceToHost,
                                 ctx_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    return count > 0 ? host_total / double(count) : 0.0;
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    ctx_.activate();
    check_same_numel("sgd", w, g);
    check_same_numel("sgd", w, buf);
    kernels::sgd_update(w.f32(), g.f32(), buf.f32(), w.numel(), spec.lr, spec.momentum,
                        spec.weight_decay, spec.nesterov, ctx_.stream());
  }

  // The tensors' table goes to the device only when it changes (the same parameters step
  // after step); a recording gets a table of its own, kept with the graph.
  void sgd_update_many(const std::vector<SgdTensors>& tensors, const SgdSpec& spec) override {
    ctx_.activate();
    std::vector<kernels::SgdSegment> table;
    table.reserve(tensors.size());
    int64_t most = 0;
    for (const SgdTensors& t : tensors) {
      check_same_numel("sgd", *t.w, *t.g);
      check_same_numel("sgd", *t.w, *t.momentum_buf);
      expect_f32(*t.w, "sgd weights");
      expect_f32(*t.g, "sgd gradient");
      expect_f32(*t.momentum_buf, "sgd momentum");
      table.push_back(
          {t.w->f32(), t.g->f32(), t.momentum_buf->f32(), t.w->numel(), t.weight_decay});
      most = std::max(most, t.w->numel());
    }
    if (table.empty()) return;
    const size_t bytes = table.size() * sizeof(kernels::SgdSegment);
    const void* device_table = nullptr;
    if (recorded_ != nullptr) {
      std::shared_ptr<void> own = ctx_.pool().allocate(bytes);
      table_staging_.copy_to_device(table.data(), own.get(), bytes, ctx_.stream(), recorded_);
      recorded_->push_back(own);
      device_table = own.get();
    } else {
      void* block = sgd_table_.reserve(ctx_.pool(), bytes);
      if (!same_table(table, sgd_table_host_)) {
        table_staging_.copy_to_device(table.data(), block, bytes, ctx_.stream(), nullptr);
        sgd_table_host_ = table;
      }
      device_table = block;
    }
    kernels::sgd_update_segments(static_cast<const kernels::SgdSegment*>(device_table),
                                 int(table.size()), most, spec.lr, spec.momentum, spec.nesterov,
                                 ctx_.stream());
  }

  void adaptive_update(Tensor& w, const Tensor& g, Tensor& m, Tensor* v,
                       const AdaptiveSpec& spec) override {
    ctx_.activate();
    check_same_numel("adaptive update", w, g);
    check_same_numel("adaptive update", w, m);
    RT_CHECK((v != nullptr) == (spec.rule != UpdateRule::kLars),
             "adaptive update: a second moment is for LAMB and AdamW only");
    if (v != nullptr) check_same_numel("adaptive update", w, *v);
    const kernels::UpdateArgs args{kernel_rule(spec.rule),
                                   spec.lr,
                                   spec.weight_decay,
                                   spec.momentum,
                                   spec.beta1,
                                   spec.beta2,
                                   spec.eps,
                                   spec.trust_coef,
                                   spec.layer_adaptation,
                                   spec.step};
    const size_t bytes = size_t(kernels::adaptive_scratch_doubles(w.numel())) * sizeof(double);
    auto* scratch = static_cast<double*>(update_scratch_.reserve(ctx_.pool(), bytes));
    kernels::adaptive_update(w.f32(), g.f32(), m.f32(), v ? v->f32() : nullptr, w.numel(), args,
                             scratch, ctx_.stream());
  }

  // Each tensor's sum on the device, the sums copied once and added on the host in order.
  double sum_of_squares(const std::vector<const Tensor*>& tensors) override {
    ctx_.activate();
    int64_t most = 1;
    for (const Tensor* t : tensors) {
      expect_f32(*t, "sum_of_squares input");
      most = std::max(most, kernels::sum_chunks(t->numel()));
    }
    const size_t bytes = (tensors.size() + size_t(most)) * sizeof(double);
    auto* totals = static_cast<double*>(update_scratch_.reserve(ctx_.pool(), bytes));
    for (size_t i = 0; i < tensors.size(); ++i)
      kernels::sum_of_squares(tensors[i]->f32(), tensors[i]->numel(), totals + tensors.size(),
                              totals + i, ctx_.stream());
    std::vector<double> host(tensors.size());
    CUDA_CHECK(cudaMemcpyAsync(host.data(), totals, host.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    double total = 0;
    for (double v : host) total += v;
    return total;
  }

  void fill(Tensor& t, float value) override {
    ctx_.activate();
    expect_f32(t, "fill target");
    kernels::fill(t.f32(), t.numel(), value, ctx_.stream());
  }

  void copy(const Tensor& src, Tensor& dst) override {
    ctx_.activate();
    expect_present(src, "copy source");
    ctx_.ensure(dst, src.shape());
    if (dst.raw() == src.raw()) return;
    if (src.dtype() != DType::kF32 || !src.is_plain()) {
      ctx_.convert(src, dst);
      return;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), size_t(src.numel()) * sizeof(float),
                               cudaMemcpyDeviceToDevice, ctx_.stream()));
  }

  void scale(Tensor& t, float factor) override {
    ctx_.activate();
    expect_f32(t, "scale target");
    kernels::axpby(0.0f, nullptr, factor, t.f32(), t.numel(), ctx_.stream());
  }

  // Without this, all_finite took Backend's default: a download of the whole tensor and a
  // host loop, for every gradient, every step.
  bool all_finite(const Tensor& t) override { return first_nonfinite({&t}) == 1; }

  // One int flag per tensor (per_tensor_results), set by flag_nonfinite: NaN and inf survive
  // the conversion to plain fp32, and order does not matter.
  size_t first_nonfinite(const std::vector<const Tensor*>& tensors) override {
    if (tensors.empty()) return 0;
    const int32_t* flags = per_tensor_results<int32_t>(
        tensors, "all_finite tensor", finite_flags_, [&](const Tensor& plain, int32_t* flag) {
          kernels::flag_nonfinite(plain.f32(), plain.numel(), flag, ctx_.stream());
        });
    for (size_t i = 0; i < tensors.size(); ++i)
      if (flags[i] != 0) return i;
    return tensors.size();
  }

  // One 64-bit sum per tensor (per_tensor_results), added by digest_sum. Parameters and
  // optimizer state are plain fp32 already (anything else is copied to plain fp32 first).
  std::vector<uint64_t> digests(const std::vector<const Tensor*>& tensors) override {
    if (tensors.empty()) return {};
    const uint64_t* sums = per_tensor_results<uint64_t>(
        tensors, "digest tensor", digest_sums_, [&](const Tensor& plain, uint64_t* sum) {
          kernels::digest_sum(plain.f32(), plain.numel(), sum, ctx_.stream());
        });
    std::vector<uint64_t> out(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i)
      out[i] = finish_digest(sums[i], uint64_t(tensors[i]->numel()));
    return out;
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    ctx_.activate();
    check_same_numel("axpby", x, y);
    expect_f32(x, "axpby x");
    expect_f32(y, "axpby y");
    kernels::axpby(a, x.f32(), b, y.f32(), y.numel(), ctx_.stream());
  }

  void axpby_pair(float a, const Tensor& x, float b, Tensor& y, float c, const Tensor& u, float d,
                  Tensor& v) override {
    ctx_.activate();
    check_same_numel("axpby", x, y);
    check_same_numel("axpby", u, v);
    for (const Tensor* t : {&x, &u}) expect_f32(*t, "axpby x");
    for (const Tensor* t : {&y, &v}) expect_f32(*t, "axpby y");
    kernels::axpby_pair({a, x.f32(), b, y.f32(), y.numel()}, {c, u.f32(), d, v.f32(), v.numel()},
                        ctx_.stream());
  }

  // What the recorded work reads or writes beyond its tensors (staged host copies, loss slots,
  // SGD's table) is the graph's.
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) override {
    RT_CHECK(recorded_ == nullptr, "cuda backend: capture() inside a capture");
    std::vector<std::shared_ptr<void>> kept;
    recorded_ = &kept;
    try {
      auto captured = capture_work(ctx_, work, kept);
      recorded_ = nullptr;
      return captured;
    } catch (...) {
      recorded_ = nullptr;
      throw;
    }
  }

  void record_ready(size_t slot) override {
    ctx_.activate();
    CUDA_CHECK(cudaEventRecord(ready_event(slot, true), ctx_.stream()));
  }

  const void* ready_mark(size_t slot) override { return ready_event(slot, false); }

  void wait_ready(size_t slot) override {
    ctx_.activate();
    CUDA_CHECK(cudaEventSynchronize(ready_event(slot, false)));
  }

 private:
  // The event of a slot, created on first record; recorded on one thread, waited on another.
  cudaEvent_t ready_event(size_t slot, bool create) {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    if (create)
      while (ready_events_.size() <= slot) ready_events_.push_back(std::make_unique<ReadyEvent>());
    RT_CHECK(slot < ready_events_.size(), "cuda backend: wait_ready(", slot,
             ") before record_ready(", slot, ")");
    return ready_events_[slot]->get();
  }

  // One T per tensor in device memory, zeroed on the stream; launch(plain, slot) queues one
  // kernel per tensor on its plain fp32 form; one copy of the slots to pinned memory and one
  // wait. The returned host slots hold until the next call with the same `results`.
  template <typename T, typename Launch>
  const T* per_tensor_results(const std::vector<const Tensor*>& tensors, const char* what,
                              TensorResults& results, Launch launch) {
    ctx_.activate();
    const size_t bytes = tensors.size() * sizeof(T);
    if (results.host.bytes() < bytes) {
      results.device = ctx_.pool().allocate(bytes);
      results.host = PinnedBuffer(bytes);
    }
    auto* slots = static_cast<T*>(results.device.get());
    CUDA_CHECK(cudaMemsetAsync(slots, 0, bytes, ctx_.stream()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      expect_present(*tensors[i], what);
      launch(ctx_.as_plain_f32(*tensors[i], results.f32), slots + i);
    }
    CUDA_CHECK(
        cudaMemcpyAsync(results.host.get(), slots, bytes, cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    return static_cast<const T*>(results.host.get());
  }

  // A slot no pending loss holds any more (the backend's reference is the only one), or a
  // new one: as many as losses are waiting to be read.
  std::shared_ptr<LossSlot> free_loss_slot() {
    for (auto& slot : loss_slots_)
      if (slot.use_count() == 1) return slot;
    loss_slots_.push_back(std::make_shared<LossSlot>());
    return loss_slots_.back();
  }

  Context ctx_;
  HostStaging upload_staging_, label_staging_, table_staging_;
  Tensor upload_f32_, download_f32_, logits_f32_;  // conversion scratch
  Tensor bce_logits_f32_;        // its own: the class loss may still be reading logits_f32_
  TensorResults finite_flags_;   // first_nonfinite: a flag per tensor
  TensorResults digest_sums_;    // digests: a sum per tensor
  ScratchBlock loss_scratch_;    // totals, per-row losses, labels, correct flags
  ScratchBlock bce_scratch_;     // total, per-value losses, targets
  ScratchBlock update_scratch_;  // the update rules' and sum_of_squares' partial sums
  ScratchBlock sgd_table_;       // sgd_update_many's tensors, as last uploaded
  std::vector<kernels::SgdSegment> sgd_table_host_;
  std::vector<std::shared_ptr<LossSlot>> loss_slots_;
  std::vector<std::shared_ptr<void>>* recorded_ = nullptr;  // while capture() records
  std::mutex ready_mutex_;
  std::vector<std::unique_ptr<ReadyEvent>> ready_events_;
};

}  // namespace

std::unique_ptr<Backend> create_backend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace ringtrain::backend::cuda
