// layers.cpp — Conv2d, BatchNorm2d, ReLU, the pools, Flatten and Linear over backend ops.
#include "ringtrain/nn/layers.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {
namespace {

Parameter make_param(Backend& be, std::string name, Shape shape, ParamRole role, int64_t fan_in) {
  Parameter p;
  p.name = std::move(name);
  p.shape = shape;
  p.value = be.alloc(shape);
  p.grad = be.alloc(shape);
  p.role = role;
  p.fan_in = fan_in;
  p.no_weight_decay = role != ParamRole::kWeight;
  be.fill(p.value, 0.0f);
  be.fill(p.grad, 0.0f);
  return p;
}

void require_4d(const std::string& layer, const Shape& in) {
  RT_CHECK(in.size() == 4, "layer ", layer, ": input ", shape_str(in), " is not [N,C,H,W]");
}

}  // namespace

int64_t Layer::activation_floats(const Shape& in) const {
  return backend::shape_numel(output_shape(in)) + backend::shape_numel(in);
}

void Layer::collect_backward_order(std::vector<Parameter*>& order) {
  std::vector<NamedBuffer> unused;
  collect(order, unused);
}

// ---- Conv2d ---------------------------------------------------------------------------

Conv2d::Conv2d(std::string name, Backend& be, int in_c, int out_c, int kernel, int stride,
               int padding, bool bias, bool fuse_relu)
    : Layer(std::move(name)), be_(be) {
  spec_ = {in_c, out_c, kernel, stride, padding, bias, fuse_relu};
  op_ = be.make_conv(spec_);
  if (fuse_relu) relu_ = be.make_relu();
  int64_t fan_in = int64_t(in_c) * kernel * kernel;
  weight_ =
      make_param(be, name_ + ".weight", {out_c, in_c, kernel, kernel}, ParamRole::kWeight, fan_in);
  if (bias) bias_ = make_param(be, name_ + ".bias", {out_c}, ParamRole::kBias, fan_in);
}

Shape Conv2d::output_shape(const Shape& in) const {
  require_4d(name_, in);
  RT_CHECK(in[1] == spec_.in_channels, "layer ", name_, ": input ", shape_str(in), " has ", in[1],
           " channels, the layer takes ", spec_.in_channels);
  int64_t oh = (in[2] + 2 * spec_.padding - spec_.kernel) / spec_.stride + 1;
  int64_t ow = (in[3] + 2 * spec_.padding - spec_.kernel) / spec_.stride + 1;
  RT_CHECK(oh >= 1 && ow >= 1, "layer ", name_, ": input ", shape_str(in), " is too small");
  return {in[0], spec_.out_channels, oh, ow};
}

const Tensor& Conv2d::forward(const Tensor& x, bool) {
  x_ = x;
  op_->forward(x, weight_.value, spec_.bias ? &bias_.value : nullptr, y_);
  return y_;
}

const Tensor& Conv2d::backward(const Tensor& dy, const GradReady& ready) {
  const Tensor* g = &dy;
  if (relu_) {
    relu_->backward(y_, dy, dy_pre_);
    g = &dy_pre_;
  }
  op_->backward_weights(x_, *g, weight_.grad_target(be_),
                        spec_.bias ? &bias_.grad_target(be_) : nullptr);
  ready(weight_);
  if (spec_.bias) ready(bias_);
  if (needs_input_grad_) op_->backward_data(*g, weight_.value, dx_);
  // The layer above has run its backward, and this one's is done: nothing reads what forward
  // kept until the next forward makes it again.
  if (transient_) {
    dy_pre_ = x_ = y_ = Tensor();
    op_->release_saved();
    if (relu_) relu_->release_saved();
  }
  return needs_input_grad_ ? dx_ : empty_;
}

// With the ReLU fused, the gradient before it is one more output-sized tensor.
int64_t Conv2d::activation_floats(const Shape& in) const {
  return Layer::activation_floats(in) +
         (spec_.fuse_relu ? backend::shape_numel(output_shape(in)) : 0);
}

double Conv2d::forward_flops(const Shape& in) const {
  Shape out = output_shape(in);
  return 2.0 * double(out[1] * out[2] * out[3]) * spec_.in_channels * spec_.kernel * spec_.kernel;
}

void Conv2d::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>&) {
  params.push_back(&weight_);
  if (spec_.bias) params.push_back(&bias_);
}

// ---- BatchNorm2d ----------------------------------------------------------------------

BatchNorm2d::BatchNorm2d(std::string name, Backend& be, int channels, bool fuse_relu,
                         float momentum, float eps)
    : Layer(std::move(name)),
      be_(be),
      channels_(channels),
      momentum_(momentum),
      eps_(eps),
      fuse_relu_(fuse_relu) {
  op_ = be.make_batch_norm({channels, eps, fuse_relu});
  gamma_ = make_param(be, name_ + ".weight", {channels}, ParamRole::kNormScale, 0);
  beta_ = make_param(be, name_ + ".bias", {channels}, ParamRole::kNormShift, 0);
  be.fill(gamma_.value, 1.0f);
  running_mean_ = be.alloc({channels});
  running_var_ = be.alloc({channels});
  be.fill(running_mean_, 0.0f);
  be.fill(running_var_, 1.0f);
}

const Tensor& BatchNorm2d::forward(const Tensor& x, bool training) {
  if (!training) {
    op_->forward_inference(x, gamma_.value, beta_.value, running_mean_, running_var_, y_);
    return y_;
  }
  x_ = x;
  const double count = op_->forward_training(x, gamma_.value, beta_.value, y_, batch_mean_,
                                             batch_var_, reducer_ ? &reducer_ : nullptr);
  update_running_statistics(batch_mean_, batch_var_, count);
  return y_;
}

const Tensor* BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  const double count =
      op_->forward_training_add_relu(x, gamma_.value, beta_.value, residual, y_, batch_mean_,
                                     batch_var_, reducer_ ? &reducer_ : nullptr);
  if (count == 0) return nullptr;
  x_ = x;
  update_running_statistics(batch_mean_, batch_var_, count);
  return &y_;
}

void BatchNorm2d::update_running_statistics(const Tensor& mean, const Tensor& var, double count) {
  // PyTorch's update: the running variance takes the unbiased batch variance.
  double unbias = count > 1 ? count / (count - 1) : 1.0;
  be_.axpby_pair(momentum_, mean, 1.0f - momentum_, running_mean_, float(momentum_ * unbias), var,
                 1.0f - momentum_, running_var_);
}

const Tensor& BatchNorm2d::backward(const Tensor& dy, const GradReady& ready) {
  op_->backward(x_, dy, gamma_.value, batch_mean_, batch_var_, dx_, gamma_.grad_target(be_),
                beta_.grad_target(be_), reducer_ ? &reducer_ : nullptr);
  ready(gamma_);
  ready(beta_);
  if (transient_) {
    x_ = y_ = Tensor();
    op_->release_saved();
  }
  return dx_;
}

double BatchNorm2d::forward_flops(const Shape&) const {
  return 0;
}

void BatchNorm2d::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) {
  params.push_back(&gamma_);
  params.push_back(&beta_);
  buffers.push_back({name_ + ".running_mean", &running_mean_});
  buffers.push_back({name_ + ".running_var", &running_var_});
}

// ---- ReLU -----------------------------------------------------------------------------

ReLU::ReLU(std::string name, Backend& be) : Layer(std::move(name)), op_(be.make_relu()) {}

const Tensor& ReLU::forward(const Tensor& x, bool) {
  op_->forward(x, y_);
  return y_;
}

const Tensor& ReLU::backward(const Tensor& dy, const GradReady&) {
  op_->backward(y_, dy, dx_);
  if (transient_) {
    y_ = Tensor();
    op_->release_saved();
  }
  return dx_;
}

// ---- pools ----------------------------------------------------------------------------

Pool2d::Pool2d(std::string name, Backend& be, const backend::PoolSpec& spec)
    : Layer(std::move(name)), spec_(spec), op_(be.make_pool(spec)) {}

Shape Pool2d::output_shape(const Shape& in) const {
  require_4d(name_, in);
  if (spec_.global) return {in[0], in[1], 1, 1};
  int64_t oh = (in[2] + 2 * spec_.padding - spec_.kernel) / spec_.stride + 1;
  int64_t ow = (in[3] + 2 * spec_.padding - spec_.kernel) / spec_.stride + 1;
  RT_CHECK(oh >= 1 && ow >= 1, "layer ", name_, ": input ", shape_str(in), " is too small");
  return {in[0], in[1], oh, ow};
}

const Tensor& Pool2d::forward(const Tensor& x, bool training) {
  op_->forward(x, y_, training);
  return y_;
}

const Tensor& Pool2d::backward(const Tensor& dy, const GradReady&) {
  op_->backward(dy, dx_);
  if (transient_) {
    y_ = Tensor();
    op_->release_saved();
  }
  return dx_;
}

double Pool2d::forward_flops(const Shape&) const {
  return 0;
}

std::unique_ptr<Layer> max_pool2d(std::string name, Backend& be, int kernel, int stride,
                                  int padding) {
  return std::make_unique<Pool2d>(
      std::move(name), be,
      backend::PoolSpec{backend::PoolKind::kMax, kernel, stride, padding, false});
}
std::unique_ptr<Layer> avg_pool2d(std::string name, Backend& be, int kernel, int stride,
                                  int padding) {
  return std::make_unique<Pool2d>(
      std::move(name), be,
      backend::PoolSpec{backend::PoolKind::kAvg, kernel, stride, padding, false});
}
std::unique_ptr<Layer> global_avg_pool(std::string name, Backend& be) {
  return std::make_unique<Pool2d>(std::move(name), be,
                                  backend::PoolSpec{backend::PoolKind::kAvg, 1, 1, 0, true});
}

// ---- batch norm + ReLU + max pool ------------------------------------------------------

BatchNormReluMaxPool::BatchNormReluMaxPool(const std::string& norm_name,
                                           const std::string& pool_name, Backend& be, int channels,
                                           int window)
    : Layer(norm_name + "+" + pool_name),
      be_(be),
      norm_(norm_name, be, channels, true),
      pool_(pool_name, be, backend::PoolSpec{backend::PoolKind::kMax, window, window, 0, false}),
      op_(be.make_norm_relu_max_pool({channels, 1e-5f, window})) {}

const Tensor& BatchNormReluMaxPool::forward(const Tensor& x, bool training) {
  if (!training) return pool_.forward(norm_.forward(x, false), false);
  x_ = x;
  const double count = op_->forward_training(x, norm_.gamma().value, norm_.beta().value, y_,
                                             batch_mean_, batch_var_, norm_.stat_reducer());
  norm_.update_running_statistics(batch_mean_, batch_var_, count);
  return y_;
}

const Tensor& BatchNormReluMaxPool::backward(const Tensor& dy, const GradReady& ready) {
  Parameter& gamma = norm_.gamma();
  Parameter& beta = norm_.beta();
  op_->backward(x_, dy, gamma.value, batch_mean_, batch_var_, dx_, gamma.grad_target(be_),
                beta.grad_target(be_), norm_.stat_reducer());
  if (transient_) {
    x_ = y_ = Tensor();
    op_->release_saved();
  }
  ready(gamma);
  ready(beta);
  return dx_;
}

// What the two layers keep: the normalised input and its gradient besides the pooled output
// and the input's gradient (a backend that fuses them keeps only the last two).
int64_t BatchNormReluMaxPool::activation_floats(const Shape& in) const {
  return Layer::activation_floats(in) + 2 * backend::shape_numel(in);
}

std::string BatchNormReluMaxPool::trace(Graph& graph, const std::string& input) const {
  return pool_.trace(graph, norm_.trace(graph, input));
}

// ---- max pool + ReLU --------------------------------------------------------------------

MaxPoolReLU::MaxPoolReLU(const std::string& pool_name, const std::string& relu_name, Backend& be,
                         int window)
    : Layer(pool_name + "+" + relu_name),
      pool_(pool_name, be, backend::PoolSpec{backend::PoolKind::kMax, window, window, 0, false}),
      relu_(relu_name, be),
      op_(be.make_max_pool_relu(window)) {}

const Tensor& MaxPoolReLU::forward(const Tensor& x, bool training) {
  op_->forward(x, y_, training);
  return y_;
}

const Tensor& MaxPoolReLU::backward(const Tensor& dy, const GradReady&) {
  // The op keeps what its backward reads (a composed op, the output for its ReLU's backward),
  // and may let it go before its pool's backward allocates the full-size gradient.
  if (transient_) y_ = Tensor();
  op_->backward(dy, dx_);
  if (transient_) op_->release_saved();
  return dx_;
}

// What the two layers keep: the pooled tensor and its gradient besides the output and the
// input's gradient (a backend that fuses them keeps a byte per pooled value instead).
int64_t MaxPoolReLU::activation_floats(const Shape& in) const {
  return Layer::activation_floats(in) + 2 * backend::shape_numel(output_shape(in));
}

std::string MaxPoolReLU::trace(Graph& graph, const std::string& input) const {
  return relu_.trace(graph, pool_.trace(graph, input));
}

// ---- Flatten, Linear ------------------------------------------------------------------

Shape Flatten::output_shape(const Shape& in) const {
  return {in.at(0), backend::shape_numel(in) / in.at(0)};
}

Linear::Linear(std::string name, Backend& be, int64_t in_features, int out_features, bool bias)
    : Layer(std::move(name)), be_(be) {
  spec_ = {in_features, out_features, bias};
  op_ = be.make_linear(spec_);
  weight_ = make_param(be, name_ + ".weight", {out_features, in_features}, ParamRole::kWeight,
                       in_features);
  if (bias) bias_ = make_param(be, name_ + ".bias", {out_features}, ParamRole::kBias, in_features);
}

Shape Linear::output_shape(const Shape& in) const {
  int64_t features = backend::shape_numel(in) / in.at(0);
  RT_CHECK(features == spec_.in_features, "layer ", name_, ": input ", shape_str(in), " has ",
           features, " features, the layer takes ", spec_.in_features);
  return {in[0], spec_.out_features};
}

const Tensor& Linear::forward(const Tensor& x, bool) {
  x_ = x;
  op_->forward(x, weight_.value, spec_.bias ? &bias_.value : nullptr, y_);
  return y_;
}

const Tensor& Linear::backward(const Tensor& dy, const GradReady& ready) {
  op_->backward_weights(x_, dy, weight_.grad_target(be_),
                        spec_.bias ? &bias_.grad_target(be_) : nullptr);
  ready(weight_);
  if (spec_.bias) ready(bias_);
  if (needs_input_grad_) op_->backward_data(dy, weight_.value, dx_);
  if (transient_) {
    x_ = y_ = Tensor();
    op_->release_saved();
  }
  return needs_input_grad_ ? dx_ : empty_;
}

double Linear::forward_flops(const Shape&) const {
  return 2.0 * double(spec_.in_features) * spec_.out_features;
}

void Linear::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>&) {
  params.push_back(&weight_);
  if (spec_.bias) params.push_back(&bias_);
}

}  // namespace ringtrain::nn
