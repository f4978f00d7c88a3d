// bf16_reference.cpp — the bf16 reference: an fp32 host backend whose ops store every
// activation in bf16 (rounded to nearest even) and multiply bf16 weights, arithmetic in fp32.
//
// It models what the cpu backend's bf16 path stores, op by op: inputs and weights are
// rounded before an op reads them, activations and activation gradients are rounded when
// an op writes them; weight and bias gradients, batch-norm statistics and the logits stay
// fp32. Values are kept in fp32 tensors, so the ref loops run unchanged; what differs from
// oneDNN is only the order of the fp32 accumulation.
#include <memory>

#include "../factories.hpp"
#include "ringtrain/core/bf16.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {
namespace {

// t's values rounded to bf16, in place (host fp32 memory: the ref backend's).
void round_in_place(Tensor& t) {
  RT_CHECK(t.is_plain() && t.dtype() == DType::kF32, "bf16 reference: plain fp32 tensors only");
  float* v = t.f32();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) v[i] = round_to_bf16(v[i]);
}

// A copy of t rounded to bf16, in scratch (reallocated only when the shape changes).
const Tensor& rounded(Backend& be, const Tensor& t, Tensor& scratch) {
  if (scratch.empty() || scratch.shape() != t.shape()) scratch = be.alloc(t.shape());
  const float* from = t.f32();
  float* to = scratch.f32();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) to[i] = round_to_bf16(from[i]);
  return scratch;
}

// Convolution and linear take the same three calls. A convolution stores its output in bf16;
// the linear layer writes fp32 outputs (the logits), as the cpu bf16 path does.
template <typename Op>
class Bf16Weighted : public Op {
 public:
  Bf16Weighted(Backend& be, std::unique_ptr<Op> op, bool round_output)
      : be_(be), op_(std::move(op)), round_output_(round_output) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    op_->forward(rounded(be_, x, x_), rounded(be_, w, w_), bias, y);
    if (round_output_) round_in_place(y);
  }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    op_->backward_data(rounded(be_, dy, dy_), rounded(be_, w, w_), dx);
    round_in_place(dx);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    op_->backward_weights(rounded(be_, x, x_), rounded(be_, dy, dy_), dw, dbias);
  }
  void release_saved() override {
    x_ = w_ = dy_ = Tensor();
    op_->release_saved();
  }

 private:
  Backend& be_;
  std::unique_ptr<Op> op_;
  bool round_output_;
  Tensor x_, w_, dy_;
};

class Bf16BatchNorm : public BatchNormOp {
 public:
  Bf16BatchNorm(Backend& be, std::unique_ptr<BatchNormOp> op) : be_(be), op_(std::move(op)) {}
  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    double count = op_->forward_training(rounded(be_, x, x_), gamma, beta, y, mean, var, reducer);
    round_in_place(y);
    return count;
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    op_->forward_inference(rounded(be_, x, x_), gamma, beta, mean, var, y);
    round_in_place(y);
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    op_->backward(rounded(be_, x, x_), rounded(be_, dy, dy_), gamma, mean, var, dx, dgamma, dbeta,
                  reducer);
    round_in_place(dx);
  }
  void release_saved() override {
    x_ = dy_ = Tensor();
    op_->release_saved();
  }

 private:
  Backend& be_;
  std::unique_ptr<BatchNormOp> op_;
  Tensor x_, dy_;
};

class Bf16Relu : public ReluOp {
 public:
  Bf16Relu(Backend& be, std::unique_ptr<ReluOp> op) : be_(be), op_(std::move(op)) {}
  void forward(const Tensor& x, Tensor& y) override {
    op_->forward(rounded(be_, x, x_), y);
    round_in_place(y);
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    op_->backward(y, rounded(be_, dy, dy_), dx);
    round_in_place(dx);
  }
  void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                       Tensor& dx) override {
    op_->backward_of_sum(y, rounded(be_, dy_a, dy_), rounded(be_, dy_b, dy_b_), dx);
    round_in_place(dx);
  }
  void release_saved() override {
    x_ = dy_ = dy_b_ = Tensor();
    op_->release_saved();
  }

 private:
  Backend& be_;
  std::unique_ptr<ReluOp> op_;
  Tensor x_, dy_, dy_b_;
};

class Bf16Pool : public PoolOp {
 public:
  Bf16Pool(Backend& be, std::unique_ptr<PoolOp> op) : be_(be), op_(std::move(op)) {}
  void forward(const Tensor& x, Tensor& y, bool training) override {
    op_->forward(rounded(be_, x, x_), y, training);
    round_in_place(y);
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    op_->backward(rounded(be_, dy, dy_), dx);
    round_in_place(dx);
  }
  void release_saved() override {
    x_ = dy_ = Tensor();
    op_->release_saved();
  }

 private:
  Backend& be_;
  std::unique_ptr<PoolOp> op_;
  Tensor x_, dy_;
};

class Bf16Add : public AddOp {
 public:
  Bf16Add(Backend& be, std::unique_ptr<AddOp> op) : be_(be), op_(std::move(op)) {}
  void forward(const Tensor& a, const Tensor& b, Tensor& out) override {
    op_->forward(rounded(be_, a, a_), rounded(be_, b, b_), out);
    round_in_place(out);
  }
  void release_saved() override {
    a_ = b_ = Tensor();
    op_->release_saved();
  }

 private:
  Backend& be_;
  std::unique_ptr<AddOp> op_;
  Tensor a_, b_;
};

class Bf16Reference : public Backend {
 public:
  explicit Bf16Reference(std::unique_ptr<Backend> fp32) : be_(std::move(fp32)) {}

  std::string name() const override { return be_->name(); }
  int threads() const override { return be_->threads(); }
  Precision precision() const override { return Precision::kBF16; }
  MemoryUse memory_use() const override { return be_->memory_use(); }
  void reset_memory_peak() override { be_->reset_memory_peak(); }

  Tensor alloc(const Shape& shape, DType dtype) override { return be_->alloc(shape, dtype); }
  void upload(const float* host, Tensor& t) override { be_->upload(host, t); }
  void download(const Tensor& t, float* host) override { be_->download(t, host); }
  void synchronize() override { be_->synchronize(); }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override {
    return std::make_unique<Bf16Weighted<ConvOp>>(*be_, be_->make_conv(s), true);
  }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return std::make_unique<Bf16Weighted<LinearOp>>(*be_, be_->make_linear(s), false);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return std::make_unique<Bf16BatchNorm>(*be_, be_->make_batch_norm(s));
  }
  std::unique_ptr<ReluOp> make_relu() override {
    return std::make_unique<Bf16Relu>(*be_, be_->make_relu());
  }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override {
    return std::make_unique<Bf16Pool>(*be_, be_->make_pool(s));
  }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override {
    return std::make_unique<Bf16Add>(*be_, be_->make_add(fuse_relu));
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& dlogits,
                                   float smoothing) override {
    return be_->softmax_cross_entropy(logits, labels, dlogits, smoothing);
  }
  double sigmoid_binary_cross_entropy(const Tensor& logits, const float* targets, float grad_weight,
                                      Tensor& dlogits) override {
    return be_->sigmoid_binary_cross_entropy(logits, targets, grad_weight, dlogits);
  }
  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    be_->sgd_update(w, g, buf, spec);
  }
  void adaptive_update(Tensor& w, const Tensor& g, Tensor& m, Tensor* v,
                       const AdaptiveSpec& spec) override {
    be_->adaptive_update(w, g, m, v, spec);
  }
  double sum_of_squares(const std::vector<const Tensor*>& tensors) override {
    return be_->sum_of_squares(tensors);
  }
  void fill(Tensor& t, float value) override { be_->fill(t, value); }
  void copy(const Tensor& src, Tensor& dst) override { be_->copy(src, dst); }
  void scale(Tensor& t, float factor) override { be_->scale(t, factor); }
  void axpby(float a, const Tensor& x, float b, Tensor& y) override { be_->axpby(a, x, b, y); }
  void record_ready(size_t slot) override { be_->record_ready(slot); }
  void wait_ready(size_t slot) override { be_->wait_ready(slot); }

 private:
  std::unique_ptr<Backend> be_;
};

}  // namespace

std::unique_ptr<Backend> make_bf16_reference(std::unique_ptr<Backend> fp32) {
  return std::make_unique<Bf16Reference>(std::move(fp32));
}

}  // namespace ringtrain::backend
