// cpu_backend.cpp — the oneDNN CPU backend: allocation, transfers, loss, SGD and the
// elementwise ops; the layer ops live in conv_linear.cpp and norm_pool.cpp.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "../factories.hpp"
#include "../host_math.hpp"
#include "ops.hpp"

namespace ringtrain::backend {
namespace cpu {
namespace {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) { omp_set_num_threads(threads); }

  std::string name() const override { return "cpu"; }
  int threads() const override { return threads_; }

  Tensor alloc(const Shape& shape, DType dtype) override {
    RT_CHECK(dtype == DType::kF32, "cpu backend: ", dtype_name(dtype), " not yet supported");
    size_t bytes = size_t(shape_numel(shape)) * sizeof(float);
    return Tensor(shape, dtype, aligned_host_alloc(bytes), bytes);
  }

  void upload(const float* host, Tensor& t) override {
    RT_CHECK(t.is_plain(), "upload into a tensor with a backend layout");
    std::memcpy(t.raw(), host, size_t(t.numel()) * sizeof(float));
  }

  void download(const Tensor& t, float* host) override {
    if (t.is_plain()) {
      std::memcpy(host, t.raw(), size_t(t.numel()) * sizeof(float));
      return;
    }
    memory dst(plain_desc(t.shape()), ctx_.engine, host);
    download_reorder_.run(ctx_, mem_of(ctx_, t), dst);
  }

  void synchronize() override { ctx_.stream.wait(); }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override { return cpu::make_conv(ctx_, s); }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return cpu::make_linear(ctx_, s);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return cpu::make_batch_norm(ctx_, s);
  }
  std::unique_ptr<ReluOp> make_relu() override { return cpu::make_relu(ctx_); }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override { return cpu::make_pool(ctx_, s); }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override {
    return cpu::make_add(ctx_, fuse_relu);
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels,
                                   Tensor& dlogits) override {
    RT_CHECK(logits.is_plain() && logits.rank() == 2, "loss: logits must be plain [N, classes]");
    if (dlogits.shape() != logits.shape()) dlogits = alloc(logits.shape(), DType::kF32);
    return host::softmax_cross_entropy(logits.f32(), labels, logits.dim(0), logits.dim(1),
                                       dlogits.f32());
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    host::check_same_numel("sgd", w, g);
    host::check_same_numel("sgd", w, buf);
    host::sgd_update(w.f32(), g.f32(), buf.f32(), w.numel(), spec);
  }

  void fill(Tensor& t, float value) override {
    RT_CHECK(t.is_plain(), "fill of a tensor with a backend layout");
    host::fill(t.f32(), t.numel(), value);
  }

  void copy(const Tensor& src, Tensor& dst) override {
    if (dst.shape() != src.shape() || !dst.is_plain()) dst = alloc(src.shape(), DType::kF32);
    download(src, dst.f32());
  }

  void scale(Tensor& t, float factor) override {
    RT_CHECK(t.is_plain(), "scale of a tensor with a backend layout");
    host::axpby(0.0f, nullptr, factor, t.f32(), t.numel());
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    host::check_same_numel("axpby", x, y);
    RT_CHECK(x.is_plain() && y.is_plain(), "axpby of tensors with a backend layout");
    host::axpby(a, x.f32(), b, y.f32(), y.numel());
  }

  void divide(Tensor& t, float divisor) override {
    RT_CHECK(t.is_plain(), "divide of a tensor with a backend layout");
    host::divide(t.f32(), t.numel(), divisor);
  }

  void record_ready(size_t) override {}
  void wait_ready(size_t) override {}

 private:
  int threads_;
  Context ctx_;
  CachedReorder download_reorder_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

}  // namespace ringtrain::backend
