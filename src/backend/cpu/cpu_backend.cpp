// cpu_backend.cpp — the oneDNN CPU backend: allocation, transfers, loss, SGD and the
// elementwise ops; the layer ops live in conv_linear.cpp and norm_pool.cpp.
#include <cmath>
#include <cstring>

#include "../host_backend.hpp"
#include "ops.hpp"

namespace ringtrain::backend {
namespace cpu {
namespace {

class CpuBackend : public HostBackend {
 public:
  explicit CpuBackend(int threads) : HostBackend(threads) {}

  std::string name() const override { return "cpu"; }

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

 private:
  Context ctx_;
  CachedReorder download_reorder_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

}  // namespace ringtrain::backend
