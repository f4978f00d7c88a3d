// norm_relu_max_pool.cpp — Backend's default NormReluMaxPoolOp: the backend's own batch norm
// (with its ReLU) and max pool, one after the other.
#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {
namespace {

class ComposedNormReluMaxPool : public NormReluMaxPoolOp {
 public:
  ComposedNormReluMaxPool(Backend& be, const NormReluMaxPoolSpec& spec)
      : norm_(be.make_batch_norm({spec.channels, spec.eps, true})),
        pool_(be.make_pool({PoolKind::kMax, spec.window, spec.window, 0, false})) {}

  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    const double count = norm_->forward_training(x, gamma, beta, normed_, mean, var, reducer);
    pool_->forward(normed_, y, true);
    return count;
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    pool_->backward(dy, dnormed_);
    norm_->backward(x, dnormed_, gamma, mean, var, dx, dgamma, dbeta, reducer);
  }

  // The normalised tensor and its gradient, and what the two ops kept from this step.
  void release_saved() override {
    normed_ = Tensor();
    dnormed_ = Tensor();
    norm_->release_saved();
    pool_->release_saved();
  }

 private:
  std::unique_ptr<BatchNormOp> norm_;
  std::unique_ptr<PoolOp> pool_;
  Tensor normed_, dnormed_;  // relu(bn(x)) and its gradient, full size
};

}  // namespace

std::unique_ptr<NormReluMaxPoolOp> Backend::make_norm_relu_max_pool(
    const NormReluMaxPoolSpec& spec) {
  return std::make_unique<ComposedNormReluMaxPool>(*this, spec);
}

}  // namespace ringtrain::backend
