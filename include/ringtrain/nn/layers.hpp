// layers.hpp — the layers models are built from: Conv2d, BatchNorm2d, ReLU, pools, Linear,
// Flatten, BasicBlock, Sequential.
//
// A layer owns its parameters, its output and its input-gradient tensors, and the
// backend op objects that compute them. Backward overwrites gradients (no accumulation)
// and calls `ready` for each parameter the moment its gradient is final.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/nn/graph.hpp"
#include "ringtrain/nn/parameter.hpp"

namespace ringtrain::nn {

using backend::Backend;
using GradReady = std::function<void(Parameter&)>;

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Shape of one output for an input of shape in (both with the batch dimension).
  virtual Shape output_shape(const Shape& in) const = 0;
  virtual const Tensor& forward(const Tensor& x, bool training) = 0;
  // dy is the gradient of the output; returns the gradient of the input (empty when the
  // input needs none, the first layer).
  virtual const Tensor& backward(const Tensor& dy, const GradReady& ready) = 0;
  // Multiply-accumulates of forward for one image, times 2 (FLOPs).
  virtual double forward_flops(const Shape& in) const {
    (void)in;
    return 0;
  }
  // Floats of activation memory training keeps for an input of shape in (with the batch
  // dimension): the layer's output and its input's gradient. An estimate, so that a batch too
  // large for memory is refused by key before any of it is allocated (Model::training_bytes).
  virtual int64_t activation_floats(const Shape& in) const;
  virtual void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) {
    (void)params;
    (void)buffers;
  }
  // Parameters in the order backward() calls `ready` for them. Leaves: collect()'s order.
  virtual void collect_backward_order(std::vector<Parameter*>& order);
  virtual void set_stat_reducer(const backend::StatReducer& reducer) { (void)reducer; }
  virtual void set_needs_input_grad(bool needed) { needs_input_grad_ = needed; }
  // Training that gives memory back as soon as it is dead (Backend::recycles_memory): a
  // parent drops each child's input gradient once the layer below has read it, a block drops
  // the outputs only its own sum reads, and each layer gives back what its forward kept (its
  // input, its output, its ops' saved state: SavedStateOp) at the end of its backward, the
  // layer above having run its own. Peak memory is then the activations backward still needs
  // and a few gradients, as autograd frees a saved tensor once its node has run. Off: every
  // tensor stays from one step to the next.
  virtual void set_transient_memory(bool on) { transient_ = on; }
  // Drops the gradient the last backward returned (its parent is done with it); the next
  // backward allocates it again.
  virtual void release_input_grad() {}
  // Calls f on this layer, then on every layer inside it (depth first, in order).
  virtual void visit(const std::function<void(Layer&)>& f) { f(*this); }
  // A ReLU's backward folded across a layer boundary (Sequential pairs neighbours). A layer
  // whose output is relu(z) (output_is_relu) may hand its ReLU's mask to the layer above when
  // that one's input gradient is a sum of two parts (sums_input_grad, a residual block): the
  // layer above then masks the sum in the pass that adds it (ReluOp::backward_of_sum), and the
  // layer below takes the gradient of z instead of its output's. One pass over the data
  // instead of two, the same numbers bitwise.
  virtual bool output_is_relu() const { return false; }
  virtual bool sums_input_grad() const { return false; }
  // mask_input_grad: mask the input gradient by the input's sign (x is the producer's relu
  // output); output_grad_masked: backward's dy is already masked by this layer's ReLU.
  virtual void set_folded_relu(bool mask_input_grad, bool output_grad_masked) {
    (void)mask_input_grad;
    (void)output_grad_masked;
  }
  // Appends what the layer computes in inference to graph, reading value `input`; returns the
  // name of its output value (graph.hpp).
  virtual std::string trace(Graph& graph, const std::string& input) const = 0;

 protected:
  std::string name_;
  bool needs_input_grad_ = true;
  bool transient_ = false;
};

class Conv2d : public Layer {
 public:
  // fuse_relu: the layer computes relu(conv(x)) (ReLU folded into the convolution).
  Conv2d(std::string name, Backend& be, int in_c, int out_c, int kernel, int stride, int padding,
         bool bias, bool fuse_relu = false);
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  double forward_flops(const Shape& in) const override;
  int64_t activation_floats(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override;
  std::string trace(Graph& graph, const std::string& input) const override;
  Parameter& weight() { return weight_; }
  Parameter* bias() { return spec_.bias ? &bias_ : nullptr; }
  backend::ConvOp& op() { return *op_; }

 private:
  Backend& be_;
  backend::ConvSpec spec_;
  std::unique_ptr<backend::ConvOp> op_;
  std::unique_ptr<backend::ReluOp> relu_;
  Parameter weight_, bias_;
  Tensor x_;
  Tensor y_, dy_pre_, dx_, empty_;
};

class BatchNorm2d : public Layer {
 public:
  // fuse_relu: the layer computes relu(bn(x)) (ReLU folded into the normalisation).
  BatchNorm2d(std::string name, Backend& be, int channels, bool fuse_relu = false,
              float momentum = 0.1f, float eps = 1e-5f);
  Shape output_shape(const Shape& in) const override { return in; }
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  // Drops the output of the last forward, where nothing but the caller's next op reads it
  // (the block's sum): batch norm's backward reads its input, never its output.
  void release_output() { y_ = Tensor(); }
  // Training forward of relu(this(x) + residual) in one op where the backend fuses it
  // (BatchNormOp::forward_training_add_relu): its output, or null where it does not (the caller
  // runs forward and adds). backward() then takes the gradient of this(x), as after forward.
  const Tensor* forward_add_relu(const Tensor& x, const Tensor& residual);
  double forward_flops(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override;
  // Synchronized BN: per-channel sums go through reducer (sum across ranks) in forward
  // and backward, so N ranks x batch b match 1 rank x batch N*b. Empty: per-rank BN.
  void set_stat_reducer(const backend::StatReducer& reducer) override { reducer_ = reducer; }
  Tensor& running_mean() { return running_mean_; }
  Tensor& running_var() { return running_var_; }
  std::string trace(Graph& graph, const std::string& input) const override;
  // For a layer that normalises through another op with this layer's parameters
  // (BatchNormReluMaxPool): gamma, beta, the reducer (null: per-rank BN), and the running
  // statistics' update from a batch's statistics over count values per channel.
  Parameter& gamma() { return gamma_; }
  Parameter& beta() { return beta_; }
  const backend::StatReducer* stat_reducer() const { return reducer_ ? &reducer_ : nullptr; }
  void update_running_statistics(const Tensor& mean, const Tensor& var, double count);

 private:
  Backend& be_;
  int channels_;
  float momentum_;
  float eps_;
  bool fuse_relu_;
  std::unique_ptr<backend::BatchNormOp> op_;
  Parameter gamma_, beta_;
  Tensor running_mean_, running_var_, batch_mean_, batch_var_;
  backend::StatReducer reducer_;
  Tensor x_;
  Tensor y_, dx_;
};

class ReLU : public Layer {
 public:
  ReLU(std::string name, Backend& be);
  Shape output_shape(const Shape& in) const override { return in; }
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  std::unique_ptr<backend::ReluOp> op_;
  Tensor y_, dx_;
};

// MaxPool2d, AvgPool2d and GlobalAvgPool (spec.global).
class Pool2d : public Layer {
 public:
  Pool2d(std::string name, Backend& be, const backend::PoolSpec& spec);
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  double forward_flops(const Shape& in) const override;
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  backend::PoolSpec spec_;
  std::unique_ptr<backend::PoolOp> op_;
  Tensor y_, dx_;
};
std::unique_ptr<Layer> max_pool2d(std::string name, Backend& be, int kernel, int stride,
                                  int padding = 0);
std::unique_ptr<Layer> avg_pool2d(std::string name, Backend& be, int kernel, int stride,
                                  int padding = 0);
std::unique_ptr<Layer> global_avg_pool(std::string name, Backend& be);

// BatchNorm2d with its ReLU, then a window x window max pool of stride window: two layers (a
// stem's) that train through one NormReluMaxPoolOp, so that a backend may fuse them. Their
// parameters, names, inference and trace are the two layers'.
class BatchNormReluMaxPool : public Layer {
 public:
  BatchNormReluMaxPool(const std::string& norm_name, const std::string& pool_name, Backend& be,
                       int channels, int window);
  Shape output_shape(const Shape& in) const override { return pool_.output_shape(in); }
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  int64_t activation_floats(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override {
    norm_.collect(params, buffers);
  }
  void set_stat_reducer(const backend::StatReducer& reducer) override {
    norm_.set_stat_reducer(reducer);
  }
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  Backend& be_;
  BatchNorm2d norm_;
  Pool2d pool_;
  std::unique_ptr<backend::NormReluMaxPoolOp> op_;
  Tensor x_, y_, dx_, batch_mean_, batch_var_;
};

// A window x window max pool of stride window, then ReLU: two layers that run through one
// Backend::make_max_pool_relu op, so that a backend may fuse them (max pooling and ReLU commute,
// so a ReLU after a pool is a small CNN's cheaper order). Their names and trace are the two
// layers'; neither has parameters.
class MaxPoolReLU : public Layer {
 public:
  MaxPoolReLU(const std::string& pool_name, const std::string& relu_name, Backend& be, int window);
  Shape output_shape(const Shape& in) const override { return pool_.output_shape(in); }
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  int64_t activation_floats(const Shape& in) const override;
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  Pool2d pool_;
  ReLU relu_;
  std::unique_ptr<backend::PoolOp> op_;
  Tensor y_, dx_;
};

// [N, C, H, W] -> [N, C*H*W]. The data is not moved: Linear reads a 4-D input in NCHW
// order, so Flatten only changes the shape the next layer is built for.
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name) : Layer(std::move(name)) {}
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool) override { return x; }
  const Tensor& backward(const Tensor& dy, const GradReady&) override { return dy; }
  int64_t activation_floats(const Shape&) const override { return 0; }  // views, no memory
  std::string trace(Graph& graph, const std::string& input) const override;
};

class Linear : public Layer {
 public:
  Linear(std::string name, Backend& be, int64_t in_features, int out_features, bool bias = true);
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  void release_input_grad() override { dx_ = Tensor(); }
  double forward_flops(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override;
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  Backend& be_;
  backend::LinearSpec spec_;
  std::unique_ptr<backend::LinearOp> op_;
  Parameter weight_, bias_;
  Tensor x_;
  Tensor y_, dx_, empty_;
};

// Layers in order; backward in reverse. Names of children are full dotted names.
class Sequential : public Layer {
 public:
  explicit Sequential(std::string name) : Layer(std::move(name)) {}
  Layer& add(std::unique_ptr<Layer> layer);
  size_t size() const { return layers_.size(); }
  Layer& at(size_t i) { return *layers_.at(i); }
  // Takes the last layer out (a model's classifier, to put heads in its place).
  std::unique_ptr<Layer> release_last();
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  double forward_flops(const Shape& in) const override;
  int64_t activation_floats(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override;
  void collect_backward_order(std::vector<Parameter*>& order) override;
  void set_stat_reducer(const backend::StatReducer& reducer) override;
  void set_needs_input_grad(bool needed) override;
  void set_transient_memory(bool on) override;
  void release_input_grad() override;
  void visit(const std::function<void(Layer&)>& f) override;
  std::string trace(Graph& graph, const std::string& input) const override;
  // Called after each child's forward or backward with its name and seconds.
  using LayerTimer = std::function<void(const std::string& layer, bool backward, double seconds)>;
  void set_layer_timer(LayerTimer timer) { timer_ = std::move(timer); }
  // Pairs neighbouring children for Layer::set_folded_relu (on by default); off, every layer
  // runs its own ReLU backward (the measurement's baseline and the tests' reference).
  void set_fold_relu_backward(bool on);

 private:
  void pair_folded_relus();

  std::vector<std::unique_ptr<Layer>> layers_;
  LayerTimer timer_;
  Layer* grad_holder_ = nullptr;  // the child whose gradient the last backward returned
  bool fold_relu_backward_ = true;
};

// ResNet's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), where the
// shortcut is x or, when the stride or width changes, bn(conv1x1(x)). Both ReLUs are
// fused: the first into bn1, the last into the addition.
class BasicBlock : public Layer {
 public:
  BasicBlock(std::string name, Backend& be, int in_c, int out_c, int stride);
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, const GradReady& ready) override;
  double forward_flops(const Shape& in) const override;
  int64_t activation_floats(const Shape& in) const override;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) override;
  void collect_backward_order(std::vector<Parameter*>& order) override;
  void set_stat_reducer(const backend::StatReducer& reducer) override;
  void set_transient_memory(bool on) override;
  void release_input_grad() override { dx_ = Tensor(); }
  void visit(const std::function<void(Layer&)>& f) override;
  bool output_is_relu() const override { return true; }
  bool sums_input_grad() const override { return true; }
  void set_folded_relu(bool mask_input_grad, bool output_grad_masked) override {
    mask_input_grad_ = mask_input_grad;
    output_grad_masked_ = output_grad_masked;
  }
  std::string trace(Graph& graph, const std::string& input) const override;

 private:
  // The layers inside, in forward order; the shortcut's two are null without a downsample.
  std::array<Layer*, 6> children() {
    return {&conv1_, &bn1_, &conv2_, &bn2_, down_conv_.get(), down_bn_.get()};
  }

  Conv2d conv1_;
  BatchNorm2d bn1_;  // with the ReLU fused
  Conv2d conv2_;
  BatchNorm2d bn2_;  // with the sum and the ReLU where the backend fuses them
  std::unique_ptr<Conv2d> down_conv_;
  std::unique_ptr<BatchNorm2d> down_bn_;
  std::unique_ptr<backend::AddOp> add_relu_;
  std::unique_ptr<backend::ReluOp> relu_out_;
  std::unique_ptr<backend::AddOp> add_grads_;
  Tensor y_, dsum_, dx_, empty_;
  const Tensor* x_ = nullptr;  // the last training forward's input, for mask_input_grad_
  const Tensor* out_ = &y_;    // the last forward's output: y_, or bn2_'s where it fused the sum
  bool mask_input_grad_ = false, output_grad_masked_ = false;
};

}  // namespace ringtrain::nn
