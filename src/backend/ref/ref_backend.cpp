// ref_backend.cpp — the reference backend: plain host memory, the loops of ref_ops.cpp.
#include <omp.h>

#include <cstring>

#include "../factories.hpp"
#include "../host_math.hpp"
#include "ref_ops.hpp"

namespace ringtrain::backend {
namespace ref {
namespace {

class RefBackend : public Backend {
 public:
  explicit RefBackend(int threads) : threads_(threads) { omp_set_num_threads(threads); }

  std::string name() const override { return "ref"; }
  int threads() const override { return threads_; }

  Tensor alloc(const Shape& shape, DType dtype) override {
    RT_CHECK(dtype == DType::kF32, "ref backend: ", dtype_name(dtype), " not supported");
    size_t bytes = size_t(shape_numel(shape)) * sizeof(float);
    return Tensor(shape, dtype, aligned_host_alloc(bytes), bytes);
  }
  void upload(const float* host, Tensor& t) override {
    std::memcpy(t.raw(), host, size_t(t.numel()) * sizeof(float));
  }
  void download(const Tensor& t, float* host) override {
    std::memcpy(host, t.raw(), size_t(t.numel()) * sizeof(float));
  }
  void synchronize() override {}

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override { return ref::make_conv(s); }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return ref::make_linear(s);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return ref::make_batch_norm(s);
  }
  std::unique_ptr<ReluOp> make_relu() override { return ref::make_relu(); }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override { return ref::make_pool(s); }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override { return ref::make_add(fuse_relu); }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels,
                                   Tensor& dlogits) override {
    RT_CHECK(logits.rank() == 2, "loss: logits must be [N, classes]");
    if (dlogits.shape() != logits.shape()) dlogits = alloc(logits.shape(), DType::kF32);
    return host::softmax_cross_entropy(logits.f32(), labels, logits.dim(0), logits.dim(1),
                                       dlogits.f32());
  }
  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    host::check_same_numel("sgd", w, g);
    host::check_same_numel("sgd", w, buf);
    host::sgd_update(w.f32(), g.f32(), buf.f32(), w.numel(), spec);
  }
  void fill(Tensor& t, float value) override { host::fill(t.f32(), t.numel(), value); }
  void copy(const Tensor& src, Tensor& dst) override {
    if (dst.shape() != src.shape()) dst = alloc(src.shape(), DType::kF32);
    download(src, dst.f32());
  }
  void scale(Tensor& t, float factor) override {
    host::axpby(0.0f, nullptr, factor, t.f32(), t.numel());
  }
  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    host::check_same_numel("axpby", x, y);
    host::axpby(a, x.f32(), b, y.f32(), y.numel());
  }
  void divide(Tensor& t, float divisor) override { host::divide(t.f32(), t.numel(), divisor); }
  void record_ready(size_t) override {}
  void wait_ready(size_t) override {}

 private:
  int threads_;
};

}  // namespace
}  // namespace ref

std::unique_ptr<Backend> make_ref_backend(int threads) {
  return std::make_unique<ref::RefBackend>(threads);
}

}  // namespace ringtrain::backend
