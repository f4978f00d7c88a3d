// ref_backend.cpp — the reference backend: plain host memory, the loops of ref_ops.cpp.
#include <cstring>

#include "../host_backend.hpp"
#include "ref_ops.hpp"

namespace ringtrain::backend {
namespace ref {
namespace {

class RefBackend : public HostBackend {
 public:
  explicit RefBackend(int threads) : HostBackend(threads) {}

  std::string name() const override { return "ref"; }
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
};

}  // namespace
}  // namespace ref

std::unique_ptr<Backend> make_ref_backend(int threads) {
  return std::make_unique<ref::RefBackend>(threads);
}

}  // namespace ringtrain::backend
