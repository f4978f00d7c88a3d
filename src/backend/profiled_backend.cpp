// profiled_backend.cpp — the timing decorator of profiled_backend.hpp: one wrapper per op
// family, each call timed to the end of the inner backend's queue and added to its kind.
#include "ringtrain/backend/profiled_backend.hpp"

#include <chrono>
#include <type_traits>
#include <utility>

namespace ringtrain::backend {

const char* op_kind_key(OpKind kind) {
  static const char* const keys[kOpKinds] = {"conv_fwd",
                                             "conv_bwd_data",
                                             "conv_bwd_weights",
                                             "matmul_fwd",
                                             "matmul_bwd_data",
                                             "matmul_bwd_weights",
                                             "bn_fwd",
                                             "bn_bwd",
                                             "relu",
                                             "pool",
                                             "add",
                                             "reorder",
                                             "loss",
                                             "optimizer",
                                             "transfer",
                                             "other"};
  return keys[int(kind)];
}

double OpProfile::total_seconds() const {
  double total = 0;
  for (double s : seconds) total += s;
  return total;
}

namespace {

// Times f() to the end of be's queue and books it (and `flops`) under kind, and the memory f()
// takes under kind too. Without a profile only the memory is booked, and nothing waits. A call
// that throws is not booked: the run it belonged to is over.
class Recorder {
 public:
  Recorder(Backend& be, std::shared_ptr<OpProfile> profile)
      : be_(be), profile_(std::move(profile)) {}

  template <typename F>
  auto time(OpKind kind, double flops, F&& f) {
    const MemoryTagScope tag{int(kind)};
    if (!profile_) return f();
    const ReorderTime reorders = be_.reorder_time();
    const auto start = Clock::now();
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      book(kind, flops, start, reorders);
    } else {
      auto result = f();
      book(kind, flops, start, reorders);
      return result;
    }
  }

 private:
  using Clock = std::chrono::steady_clock;

  // The reorders the call ran go to kReorder, the rest of its time to its kind.
  void book(OpKind kind, double flops, Clock::time_point start, const ReorderTime& before) {
    be_.synchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const ReorderTime after = be_.reorder_time();
    const double reordering = after.seconds - before.seconds;
    const int k = int(kind), r = int(OpKind::kReorder);
    profile_->seconds[k] += seconds - reordering;
    profile_->calls[k] += 1;
    profile_->flops[k] += flops;
    profile_->seconds[r] += reordering;
    profile_->calls[r] += after.calls - before.calls;
  }

  Backend& be_;
  std::shared_ptr<OpProfile> profile_;
};

// 2 x (multiply-adds) of a convolution with output [n, out_channels, oh, ow]: each output
// value takes in_channels x k x k of them, in each of the three directions.
double conv_flops(const ConvSpec& s, int64_t n, int64_t oh, int64_t ow) {
  return 2.0 * double(n) * s.out_channels * double(oh) * double(ow) * s.in_channels * s.kernel *
         s.kernel;
}

// The same from the input x [n, c, h, w].
double conv_flops_of_input(const ConvSpec& s, const Tensor& x) {
  const auto out = [&](int64_t size) { return (size + 2 * s.padding - s.kernel) / s.stride + 1; };
  return conv_flops(s, x.dim(0), out(x.dim(2)), out(x.dim(3)));
}

// The same from the output gradient dy [n, out_channels, oh, ow].
double conv_flops_of_output(const ConvSpec& s, const Tensor& dy) {
  return conv_flops(s, dy.dim(0), dy.dim(2), dy.dim(3));
}

class ProfiledConv : public ConvOp {
 public:
  ProfiledConv(Recorder& r, ConvSpec s, std::unique_ptr<ConvOp> op)
      : r_(r), s_(s), op_(std::move(op)) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    r_.time(OpKind::kConvForward, conv_flops_of_input(s_, x), [&] { op_->forward(x, w, bias, y); });
  }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    r_.time(OpKind::kConvBackwardData, conv_flops_of_output(s_, dy),
            [&] { op_->backward_data(dy, w, dx); });
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    r_.time(OpKind::kConvBackwardWeights, conv_flops_of_output(s_, dy),
            [&] { op_->backward_weights(x, dy, dw, dbias); });
  }
  std::string weight_grad_choice() const override { return op_->weight_grad_choice(); }
  void preset_weight_grad(const std::string& choice) override { op_->preset_weight_grad(choice); }
  WeightGradTimes weight_grad_times() const override { return op_->weight_grad_times(); }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  ConvSpec s_;
  std::unique_ptr<ConvOp> op_;
};

class ProfiledLinear : public LinearOp {
 public:
  ProfiledLinear(Recorder& r, LinearSpec s, std::unique_ptr<LinearOp> op)
      : r_(r), s_(s), op_(std::move(op)) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    r_.time(OpKind::kMatmulForward, flops(x.dim(0)), [&] { op_->forward(x, w, bias, y); });
  }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    r_.time(OpKind::kMatmulBackwardData, flops(dy.dim(0)), [&] { op_->backward_data(dy, w, dx); });
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    r_.time(OpKind::kMatmulBackwardWeights, flops(dy.dim(0)),
            [&] { op_->backward_weights(x, dy, dw, dbias); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  double flops(int64_t batch) const {
    return 2.0 * double(batch) * s_.in_features * s_.out_features;
  }
  Recorder& r_;
  LinearSpec s_;
  std::unique_ptr<LinearOp> op_;
};

class ProfiledBatchNorm : public BatchNormOp {
 public:
  ProfiledBatchNorm(Recorder& r, std::unique_ptr<BatchNormOp> op) : r_(r), op_(std::move(op)) {}
  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    return r_.time(OpKind::kBatchNormForward, 0,
                   [&] { return op_->forward_training(x, gamma, beta, y, mean, var, reducer); });
  }
  // Booked as batch norm, the sum and ReLU riding along.
  double forward_training_add_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& residual, Tensor& y, Tensor& mean, Tensor& var,
                                   const StatReducer* reducer) override {
    return r_.time(OpKind::kBatchNormForward, 0, [&] {
      return op_->forward_training_add_relu(x, gamma, beta, residual, y, mean, var, reducer);
    });
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    r_.time(OpKind::kBatchNormForward, 0,
            [&] { op_->forward_inference(x, gamma, beta, mean, var, y); });
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    r_.time(OpKind::kBatchNormBackward, 0,
            [&] { op_->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, reducer); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  std::unique_ptr<BatchNormOp> op_;
};

// Booked as batch norm: on the cpu its passes are the batch norm's, the pool rides along.
class ProfiledNormReluMaxPool : public NormReluMaxPoolOp {
 public:
  ProfiledNormReluMaxPool(Recorder& r, std::unique_ptr<NormReluMaxPoolOp> op)
      : r_(r), op_(std::move(op)) {}
  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    return r_.time(OpKind::kBatchNormForward, 0,
                   [&] { return op_->forward_training(x, gamma, beta, y, mean, var, reducer); });
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    r_.time(OpKind::kBatchNormBackward, 0,
            [&] { op_->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, reducer); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  std::unique_ptr<NormReluMaxPoolOp> op_;
};

class ProfiledRelu : public ReluOp {
 public:
  ProfiledRelu(Recorder& r, std::unique_ptr<ReluOp> op) : r_(r), op_(std::move(op)) {}
  void forward(const Tensor& x, Tensor& y) override {
    r_.time(OpKind::kRelu, 0, [&] { op_->forward(x, y); });
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    r_.time(OpKind::kRelu, 0, [&] { op_->backward(y, dy, dx); });
  }
  void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                       Tensor& dx) override {
    r_.time(OpKind::kRelu, 0, [&] { op_->backward_of_sum(y, dy_a, dy_b, dx); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  std::unique_ptr<ReluOp> op_;
};

class ProfiledPool : public PoolOp {
 public:
  ProfiledPool(Recorder& r, std::unique_ptr<PoolOp> op) : r_(r), op_(std::move(op)) {}
  void forward(const Tensor& x, Tensor& y, bool training) override {
    r_.time(OpKind::kPool, 0, [&] { op_->forward(x, y, training); });
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    r_.time(OpKind::kPool, 0, [&] { op_->backward(dy, dx); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  std::unique_ptr<PoolOp> op_;
};

class ProfiledAdd : public AddOp {
 public:
  ProfiledAdd(Recorder& r, std::unique_ptr<AddOp> op) : r_(r), op_(std::move(op)) {}
  void forward(const Tensor& a, const Tensor& b, Tensor& out) override {
    r_.time(OpKind::kAdd, 0, [&] { op_->forward(a, b, out); });
  }
  void release_saved() override { op_->release_saved(); }

 private:
  Recorder& r_;
  std::unique_ptr<AddOp> op_;
};

class ProfiledBackend : public Backend {
 public:
  ProfiledBackend(std::unique_ptr<Backend> inner, std::shared_ptr<OpProfile> profile)
      : be_(std::move(inner)), r_(*be_, std::move(profile)) {}

  std::string name() const override { return be_->name(); }
  int threads() const override { return be_->threads(); }
  Precision precision() const override { return be_->precision(); }
  std::string instruction_set() const override { return be_->instruction_set(); }
  std::string libraries() const override { return be_->libraries(); }
  std::string op_choices() const override { return be_->op_choices(); }
  MemoryUse memory_use() const override { return be_->memory_use(); }
  ReorderTime reorder_time() const override { return be_->reorder_time(); }
  void reset_memory_peak() override { be_->reset_memory_peak(); }
  bool recycles_memory() const override { return be_->recycles_memory(); }
  bool fuses_conv_residual() const override { return be_->fuses_conv_residual(); }

  Tensor alloc(const Shape& shape, DType dtype) override { return be_->alloc(shape, dtype); }
  void upload(const float* host, Tensor& t) override {
    r_.time(OpKind::kTransfer, 0, [&] { be_->upload(host, t); });
  }
  void download(const Tensor& t, float* host) override {
    r_.time(OpKind::kTransfer, 0, [&] { be_->download(t, host); });
  }
  void synchronize() override { be_->synchronize(); }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override {
    return std::make_unique<ProfiledConv>(r_, s, be_->make_conv(s));
  }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return std::make_unique<ProfiledLinear>(r_, s, be_->make_linear(s));
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return std::make_unique<ProfiledBatchNorm>(r_, be_->make_batch_norm(s));
  }
  std::unique_ptr<NormReluMaxPoolOp> make_norm_relu_max_pool(
      const NormReluMaxPoolSpec& s) override {
    return std::make_unique<ProfiledNormReluMaxPool>(r_, be_->make_norm_relu_max_pool(s));
  }
  std::unique_ptr<ReluOp> make_relu() override {
    return std::make_unique<ProfiledRelu>(r_, be_->make_relu());
  }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override {
    return std::make_unique<ProfiledPool>(r_, be_->make_pool(s));
  }
  std::unique_ptr<PoolOp> make_max_pool_relu(int window) override {
    return std::make_unique<ProfiledPool>(r_, be_->make_max_pool_relu(window));
  }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override {
    return std::make_unique<ProfiledAdd>(r_, be_->make_add(fuse_relu));
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& dlogits,
                                   float smoothing) override {
    return r_.time(OpKind::kLoss, 0,
                   [&] { return be_->softmax_cross_entropy(logits, labels, dlogits, smoothing); });
  }
  // Queued like the inner backend's: what it costs is booked now, its read stays lazy.
  PendingLoss softmax_cross_entropy_later(const Tensor& logits, const int32_t* labels,
                                          Tensor& dlogits, float smoothing) override {
    return r_.time(OpKind::kLoss, 0, [&] {
      return be_->softmax_cross_entropy_later(logits, labels, dlogits, smoothing);
    });
  }
  double sigmoid_binary_cross_entropy(const Tensor& logits, const float* targets, float grad_weight,
                                      Tensor& dlogits) override {
    return r_.time(OpKind::kLoss, 0, [&] {
      return be_->sigmoid_binary_cross_entropy(logits, targets, grad_weight, dlogits);
    });
  }
  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    r_.time(OpKind::kOptimizer, 0, [&] { be_->sgd_update(w, g, buf, spec); });
  }
  void sgd_update_many(const std::vector<SgdTensors>& tensors, const SgdSpec& spec) override {
    r_.time(OpKind::kOptimizer, 0, [&] { be_->sgd_update_many(tensors, spec); });
  }
  void adaptive_update(Tensor& w, const Tensor& g, Tensor& m, Tensor* v,
                       const AdaptiveSpec& spec) override {
    r_.time(OpKind::kOptimizer, 0, [&] { be_->adaptive_update(w, g, m, v, spec); });
  }
  double sum_of_squares(const std::vector<const Tensor*>& tensors) override {
    return r_.time(OpKind::kOptimizer, 0, [&] { return be_->sum_of_squares(tensors); });
  }
  void fill(Tensor& t, float value) override {
    r_.time(OpKind::kOther, 0, [&] { be_->fill(t, value); });
  }
  void copy(const Tensor& src, Tensor& dst) override {
    r_.time(OpKind::kTransfer, 0, [&] { be_->copy(src, dst); });
  }
  void scale(Tensor& t, float factor) override {
    r_.time(OpKind::kOther, 0, [&] { be_->scale(t, factor); });
  }
  bool all_finite(const Tensor& t) override {
    return r_.time(OpKind::kOther, 0, [&] { return be_->all_finite(t); });
  }
  size_t first_nonfinite(const std::vector<const Tensor*>& tensors) override {
    return r_.time(OpKind::kOther, 0, [&] { return be_->first_nonfinite(tensors); });
  }
  std::vector<uint64_t> digests(const std::vector<const Tensor*>& tensors) override {
    return r_.time(OpKind::kOther, 0, [&] { return be_->digests(tensors); });
  }
  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    r_.time(OpKind::kOther, 0, [&] { be_->axpby(a, x, b, y); });
  }
  void axpby_pair(float a, const Tensor& x, float b, Tensor& y, float c, const Tensor& u, float d,
                  Tensor& v) override {
    r_.time(OpKind::kOther, 0, [&] { be_->axpby_pair(a, x, b, y, c, u, d, v); });
  }
  // The gradient-ready marks order the reduction thread against backward: passed through
  // untimed (a profile of one process has no reduction to wait for).
  void record_ready(size_t slot) override { be_->record_ready(slot); }
  void wait_ready(size_t slot) override { be_->wait_ready(slot); }
  const void* ready_mark(size_t slot) override { return be_->ready_mark(slot); }

 private:
  std::unique_ptr<Backend> be_;
  Recorder r_;
};

}  // namespace

std::unique_ptr<Backend> make_profiled_backend(std::unique_ptr<Backend> inner,
                                               std::shared_ptr<OpProfile> profile) {
  return std::make_unique<ProfiledBackend>(std::move(inner), std::move(profile));
}

}  // namespace ringtrain::backend
