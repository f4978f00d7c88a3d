// cuda_backend.cpp — the CUDA backend: allocation from the pool, transfers on the compute
// stream, the loss, SGD and elementwise ops on our kernels; layer ops in conv_linear.cpp
// and norm_pool.cpp.
#include <mutex>
#include <numeric>
#include <vector>

#include "../factories.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

inline cudaError_t create_ready_event(cudaEvent_t* e) {
  // No timing (cheaper to record); a waiting thread sleeps instead of spinning on a core
  // the ranks' CPU work needs.
  return cudaEventCreateWithFlags(e, cudaEventDisableTiming | cudaEventBlockingSync);
}
using ReadyEvent = Owned<cudaEvent_t, create_ready_event, cudaEventDestroy>;

void check_same_numel(const char* op, const Tensor& a, const Tensor& b) {
  RT_CHECK(a.numel() == b.numel(), op, ": tensors ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), " differ in size");
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : ctx_(options) {}
  ~CudaBackend() override {
    (void)cudaSetDevice(ctx_.device());  // a destructor never throws
    // Queued work may still read pool blocks the members below give back.
    (void)cudaStreamSynchronize(ctx_.stream());
  }

  std::string name() const override { return "cuda"; }
  int threads() const override { return 1; }

  Tensor alloc(const Shape& shape, DType dtype) override { return ctx_.alloc(shape, dtype); }

  void upload(const float* host, Tensor& t) override {
    ctx_.activate();
    expect_f32(t, "upload target");
    CUDA_CHECK(cudaMemcpyAsync(t.raw(), host, size_t(t.numel()) * sizeof(float),
                               cudaMemcpyHostToDevice, ctx_.stream()));
    // The caller may reuse its host buffer as soon as we return.
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  }

  void download(const Tensor& t, float* host) override {
    ctx_.activate();
    expect_f32(t, "download source");
    CUDA_CHECK(cudaMemcpyAsync(host, t.raw(), size_t(t.numel()) * sizeof(float),
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

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels,
                                   Tensor& dlogits) override {
    ctx_.activate();
    expect_f32(logits, "loss logits");
    RT_CHECK(logits.rank() == 2, "loss: logits must be plain [N, classes]");
    const int64_t n = logits.dim(0), classes = logits.dim(1);
    for (int64_t i = 0; i < n; ++i)
      RT_CHECK(labels[i] >= 0 && labels[i] < classes, "label ", labels[i], " of image ", i,
               " is outside [0, ", classes, ")");
    ctx_.ensure(dlogits, logits.shape());
    // One block holds the labels in, the per-row loss and correct flags out.
    const size_t label_bytes = size_t(n) * sizeof(int32_t);
    const size_t loss_bytes = size_t(n) * sizeof(double);
    std::shared_ptr<void> scratch = ctx_.pool().allocate(loss_bytes + 2 * label_bytes);
    auto* row_loss = static_cast<double*>(scratch.get());
    auto* device_labels = reinterpret_cast<int32_t*>(row_loss + n);
    int32_t* row_correct = device_labels + n;
    CUDA_CHECK(
        cudaMemcpyAsync(device_labels, labels, label_bytes, cudaMemcpyHostToDevice, ctx_.stream()));
    kernels::softmax_cross_entropy(logits.f32(), device_labels, n, classes, dlogits.f32(), row_loss,
                                   row_correct, ctx_.stream());
    std::vector<double> losses(static_cast<size_t>(n));
    std::vector<int32_t> correct(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(losses.data(), row_loss, loss_bytes, cudaMemcpyDeviceToHost,
                               ctx_.stream()));
    CUDA_CHECK(cudaMemcpyAsync(correct.data(), row_correct, label_bytes, cudaMemcpyDeviceToHost,
                               ctx_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    LossResult result;
    result.count = n;
    result.loss = n > 0 ? std::accumulate(losses.begin(), losses.end(), 0.0) / double(n) : 0.0;
    result.correct = std::accumulate(correct.begin(), correct.end(), int64_t(0));
    return result;
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    ctx_.activate();
    check_same_numel("sgd", w, g);
    check_same_numel("sgd", w, buf);
    kernels::sgd_update(w.f32(), g.f32(), buf.f32(), w.numel(), spec.lr, spec.momentum,
                        spec.weight_decay, spec.nesterov, ctx_.stream());
  }

  void fill(Tensor& t, float value) override {
    ctx_.activate();
    expect_f32(t, "fill target");
    kernels::fill(t.f32(), t.numel(), value, ctx_.stream());
  }

  void copy(const Tensor& src, Tensor& dst) override {
    ctx_.activate();
    expect_f32(src, "copy source");
    ctx_.ensure(dst, src.shape());
    if (dst.raw() == src.raw()) return;
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), size_t(src.numel()) * sizeof(float),
                               cudaMemcpyDeviceToDevice, ctx_.stream()));
  }

  void scale(Tensor& t, float factor) override {
    ctx_.activate();
    expect_f32(t, "scale target");
    kernels::axpby(0.0f, nullptr, factor, t.f32(), t.numel(), ctx_.stream());
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    ctx_.activate();
    check_same_numel("axpby", x, y);
    expect_f32(x, "axpby x");
    expect_f32(y, "axpby y");
    kernels::axpby(a, x.f32(), b, y.f32(), y.numel(), ctx_.stream());
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

  Context ctx_;
  std::mutex ready_mutex_;
  std::vector<std::unique_ptr<ReadyEvent>> ready_events_;
};

}  // namespace

std::unique_ptr<Backend> create_backend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace ringtrain::backend::cuda
