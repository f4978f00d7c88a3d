// max_pool_relu.cpp — Backend's default max pool + ReLU: the backend's own pool and ReLU ops, one
// after the other.
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {
namespace {

class ComposedMaxPoolRelu : public PoolOp {
 public:
  ComposedMaxPoolRelu(Backend& be, int window)
      : pool_(be.make_pool({PoolKind::kMax, window, window, 0, false})), relu_(be.make_relu()) {}

  void forward(const Tensor& x, Tensor& y, bool training) override {
    pool_->forward(x, pooled_, training);
    relu_->forward(pooled_, y);
    if (training) y_ = y;
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    RT_CHECK(!y_.empty(), "max pool + ReLU: backward before a training forward");
    relu_->backward(y_, dy, dpooled_);
    // The ReLU's output is no longer read: where the layer has let it go (transient memory) it is
    // freed before the pool's backward allocates the full-size gradient.
    y_ = Tensor();
    pool_->backward(dpooled_, dx);
  }

  void release_saved() override {
    pooled_ = dpooled_ = y_ = Tensor();
    pool_->release_saved();
    relu_->release_saved();
  }

 private:
  std::unique_ptr<PoolOp> pool_;
  std::unique_ptr<ReluOp> relu_;
  Tensor pooled_, dpooled_, y_;  // the pool's output and its gradient; the ReLU's output
};

}  // namespace

std::unique_ptr<PoolOp> Backend::make_max_pool_relu(int window) {
  return std::make_unique<ComposedMaxPoolRelu>(*this, window);
}

}  // namespace ringtrain::backend
