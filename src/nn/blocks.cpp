// blocks.cpp — Sequential and ResNet's BasicBlock.
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

// ---- Sequential -----------------------------------------------------------------------

Layer& Sequential::add(std::unique_ptr<Layer> layer) {
  layers_.push_back(std::move(layer));
  pair_folded_relus();
  return *layers_.back();
}

std::unique_ptr<Layer> Sequential::release_last() {
  RT_CHECK(!layers_.empty(), "sequential ", name_, ": no layer to release");
  std::unique_ptr<Layer> last = std::move(layers_.back());
  layers_.pop_back();
  last->set_folded_relu(false, false);
  pair_folded_relus();
  return last;
}

void Sequential::visit(const std::function<void(Layer&)>& f) {
  f(*this);
  for (auto& layer : layers_) layer->visit(f);
}

void Sequential::set_fold_relu_backward(bool on) {
  fold_relu_backward_ = on;
  pair_folded_relus();
}

// Layer i folds its input's ReLU when layer i - 1's output is one and i sums its gradient.
void Sequential::pair_folded_relus() {
  auto folds = [&](size_t below) {
    return fold_relu_backward_ && below + 1 < layers_.size() && layers_[below]->output_is_relu() &&
           layers_[below + 1]->sums_input_grad();
  };
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->set_folded_relu(i > 0 && folds(i - 1), folds(i));
}

Shape Sequential::output_shape(const Shape& in) const {
  Shape shape = in;
  for (const auto& layer : layers_) shape = layer->output_shape(shape);
  return shape;
}

const Tensor& Sequential::forward(const Tensor& x, bool training) {
  const Tensor* cur = &x;
  for (auto& layer : layers_) {
    if (!timer_) {
      cur = &layer->forward(*cur, training);
      continue;
    }
    Stopwatch watch;
    cur = &layer->forward(*cur, training);
    timer_(layer->name(), false, watch.seconds());
  }
  return *cur;
}

const Tensor& Sequential::backward(const Tensor& dy, const GradReady& ready) {
  const Tensor* cur = &dy;
  grad_holder_ = nullptr;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    Layer& layer = **it;
    const Tensor* next = nullptr;
    if (!timer_) {
      next = &layer.backward(*cur, ready);
    } else {
      Stopwatch watch;
      next = &layer.backward(*cur, ready);
      timer_(layer.name(), true, watch.seconds());
    }
    // A layer that hands its dy through (Flatten) leaves the gradient with its holder.
    if (next == cur) continue;
    if (transient_ && grad_holder_ != nullptr) grad_holder_->release_input_grad();
    grad_holder_ = &layer;
    cur = next;
  }
  return *cur;
}

void Sequential::set_transient_memory(bool on) {
  transient_ = on;
  for (auto& layer : layers_) layer->set_transient_memory(on);
}

void Sequential::release_input_grad() {
  if (grad_holder_ != nullptr) grad_holder_->release_input_grad();
  grad_holder_ = nullptr;
}

namespace {

// per_layer(layer, its input shape) summed over the layers, each shape the previous one's output.
template <typename Sum, typename PerLayer>
Sum sum_over_layers(const std::vector<std::unique_ptr<Layer>>& layers, const Shape& in,
                    PerLayer per_layer) {
  Sum total = 0;
  Shape shape = in;
  for (const auto& layer : layers) {
    total += per_layer(*layer, shape);
    shape = layer->output_shape(shape);
  }
  return total;
}

}  // namespace

double Sequential::forward_flops(const Shape& in) const {
  return sum_over_layers<double>(
      layers_, in, [](const Layer& layer, const Shape& x) { return layer.forward_flops(x); });
}

int64_t Sequential::activation_floats(const Shape& in) const {
  return sum_over_layers<int64_t>(
      layers_, in, [](const Layer& layer, const Shape& x) { return layer.activation_floats(x); });
}

void Sequential::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) {
  for (auto& layer : layers_) layer->collect(params, buffers);
}

void Sequential::collect_backward_order(std::vector<Parameter*>& order) {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) (*it)->collect_backward_order(order);
}

void Sequential::set_stat_reducer(const backend::StatReducer& reducer) {
  for (auto& layer : layers_) layer->set_stat_reducer(reducer);
}

void Sequential::set_needs_input_grad(bool needed) {
  needs_input_grad_ = needed;
  if (!layers_.empty()) layers_.front()->set_needs_input_grad(needed);
}

// ---- BasicBlock -----------------------------------------------------------------------

BasicBlock::BasicBlock(std::string name, Backend& be, int in_c, int out_c, int stride)
    : Layer(name),
      conv1_(name + ".conv1", be, in_c, out_c, 3, stride, 1, false),
      bn1_(name + ".bn1", be, out_c, true),
      conv2_(name + ".conv2", be, out_c, out_c, 3, 1, 1, false),
      bn2_(name + ".bn2", be, out_c),
      add_relu_(be.make_add(true)),
      relu_out_(be.make_relu()),
      add_grads_(be.make_add(false)) {
  if (stride != 1 || in_c != out_c) {
    down_conv_ =
        std::make_unique<Conv2d>(name + ".downsample.0", be, in_c, out_c, 1, stride, 0, false);
    down_bn_ = std::make_unique<BatchNorm2d>(name + ".downsample.1", be, out_c);
  }
}

Shape BasicBlock::output_shape(const Shape& in) const {
  return conv1_.output_shape(in);
}

const Tensor& BasicBlock::forward(const Tensor& x, bool training) {
  if (training) x_ = &x;
  const Tensor* a = &conv1_.forward(x, training);
  a = &bn1_.forward(*a, training);
  a = &conv2_.forward(*a, training);
  const Tensor* shortcut = &x;
  if (down_conv_) shortcut = &down_bn_->forward(down_conv_->forward(x, training), training);
  // bn2, the sum and the ReLU in one pass where the backend fuses them (training only).
  out_ = training ? bn2_.forward_add_relu(*a, *shortcut) : nullptr;
  if (!out_) {
    add_relu_->forward(bn2_.forward(*a, training), *shortcut, y_);
    out_ = &y_;
  }
  if (training && transient_) {
    // Only the sum read them: backward needs the batch norms' inputs, not their outputs.
    if (out_ == &y_) bn2_.release_output();
    if (down_bn_) down_bn_->release_output();
  }
  return *out_;
}

// dsum is the gradient of the sum: dy through the block's ReLU, which the block above has
// applied already when output_grad_masked_.
const Tensor& BasicBlock::backward(const Tensor& dy, const GradReady& ready) {
  const Tensor* dsum = &dy;
  if (!output_grad_masked_) {
    relu_out_->backward(*out_, dy, dsum_);
    dsum = &dsum_;
  }
  const Tensor* dshort = dsum;
  if (down_conv_) {
    dshort = &down_conv_->backward(down_bn_->backward(*dsum, ready), ready);
    if (transient_) down_bn_->release_input_grad();
  }
  const Tensor* g = &bn2_.backward(*dsum, ready);
  g = &conv2_.backward(*g, ready);
  if (transient_) bn2_.release_input_grad();
  g = &bn1_.backward(*g, ready);
  if (transient_) conv2_.release_input_grad();
  g = &conv1_.backward(*g, ready);
  if (transient_) bn1_.release_input_grad();
  if (needs_input_grad_ && mask_input_grad_) {
    RT_CHECK(x_ != nullptr, "block ", name_, ": backward before a training forward");
    relu_out_->backward_of_sum(*x_, *g, *dshort, dx_);
  } else if (needs_input_grad_) {
    add_grads_->forward(*g, *dshort, dx_);
  }
  if (transient_) {
    conv1_.release_input_grad();
    if (down_conv_) down_conv_->release_input_grad();
    dsum_ = Tensor();
    y_ = Tensor();  // the block above has read it (its input), and the ReLU's mask here
    add_relu_->release_saved();
    relu_out_->release_saved();
    add_grads_->release_saved();
  }
  return needs_input_grad_ ? dx_ : empty_;
}

double BasicBlock::forward_flops(const Shape& in) const {
  Shape mid = conv1_.output_shape(in);
  double flops = conv1_.forward_flops(in) + conv2_.forward_flops(mid);
  if (down_conv_) flops += down_conv_->forward_flops(in);
  return flops;
}

// The children's, and the block's own output, the gradient of the sum and its input gradient.
int64_t BasicBlock::activation_floats(const Shape& in) const {
  const Shape mid = conv1_.output_shape(in);
  int64_t floats = conv1_.activation_floats(in) + bn1_.activation_floats(mid) +
                   conv2_.activation_floats(mid) + bn2_.activation_floats(mid);
  if (down_conv_) floats += down_conv_->activation_floats(in) + down_bn_->activation_floats(mid);
  return floats + 2 * backend::shape_numel(mid) + backend::shape_numel(in);
}

void BasicBlock::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) {
  conv1_.collect(params, buffers);
  bn1_.collect(params, buffers);
  conv2_.collect(params, buffers);
  bn2_.collect(params, buffers);
  if (down_conv_) {
    down_conv_->collect(params, buffers);
    down_bn_->collect(params, buffers);
  }
}

void BasicBlock::collect_backward_order(std::vector<Parameter*>& order) {
  if (down_conv_) {
    down_bn_->collect_backward_order(order);
    down_conv_->collect_backward_order(order);
  }
  bn2_.collect_backward_order(order);
  conv2_.collect_backward_order(order);
  bn1_.collect_backward_order(order);
  conv1_.collect_backward_order(order);
}

void BasicBlock::set_transient_memory(bool on) {
  transient_ = on;
  for (Layer* child : children())
    if (child != nullptr) child->set_transient_memory(on);
}

void BasicBlock::visit(const std::function<void(Layer&)>& f) {
  f(*this);
  for (Layer* child : children())
    if (child != nullptr) child->visit(f);
}

void BasicBlock::set_stat_reducer(const backend::StatReducer& reducer) {
  bn1_.set_stat_reducer(reducer);
  bn2_.set_stat_reducer(reducer);
  if (down_bn_) down_bn_->set_stat_reducer(reducer);
}

}  // namespace ringtrain::nn
