// model.hpp — Model: a network, its loss and its parameters; make_model builds the zoo.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/nn/inspect_heads.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

using backend::LossResult;

// The data's per-image shape.
struct ModelInput {
  int channels = 1;
  int height = 28;
  int width = 28;
};

class Model {
 public:
  // With heads.kind = kInspect, net's last layer (its classifier Linear) moves into the
  // inspection heads (inspect_heads.hpp), fed by the output of the layers before it.
  Model(std::string name, Backend& be, const ModelInput& in, int classes,
        std::unique_ptr<Sequential> net, const HeadsSpec& heads = {});

  const std::string& name() const { return name_; }
  const ModelInput& input() const { return input_; }
  int classes() const { return classes_; }
  Heads heads() const { return heads_.kind; }
  // The inspection heads; null with model.heads = class.
  InspectHeads* inspect() { return inspect_.get(); }
  Backend& backend() { return be_; }

  // input: [N, C, H, W] on the device (plain). Returns the logits [N, classes]; with
  // inspection heads their logits are then in inspect()->output().
  const Tensor& forward(const Tensor& input, bool training);
  // Softmax cross-entropy (mean over the batch) of the last forward against host labels
  // (one per image); sets the logits' gradient for backward(), multiplied by grad_scale (the
  // loss scale: a power of two scales every gradient of backward exactly). The loss returned
  // is never scaled. label_smoothing: Backend::softmax_cross_entropy's (training only).
  LossResult loss(const int32_t* labels, float grad_scale = 1.0f, float label_smoothing = 0.0f);
  // The same, its numbers read when the caller asks (Backend::softmax_cross_entropy_later):
  // the training loop does not wait for forward to finish before queueing backward.
  backend::PendingLoss loss_later(const int32_t* labels, float grad_scale = 1.0f,
                                  float label_smoothing = 0.0f);
  // With inspection heads: their weighted BCE losses of the last forward, whose gradients
  // backward() adds to the class loss's (call after loss() or loss_later()).
  InspectLosses inspect_loss(const InspectTargets& targets, const InspectWeights& weights,
                             float grad_scale = 1.0f);
  // Backprop of the last loss(). Calls on_grad_ready(i) the moment parameters()[i]'s
  // gradient is final, in backward_order(). Gradients are overwritten, or with `accumulate`
  // this batch's gradient is added to them in fp32 (gradient accumulation's later
  // micro-batches; each parameter keeps a scratch gradient for it).
  void backward(const std::function<void(size_t param_index)>& on_grad_ready = {},
                bool accumulate = false);
  void zero_grad();

  // Parameters in forward (PyTorch state_dict) order.
  const std::vector<Parameter*>& parameters() const { return params_; }
  // Indices into parameters() in the order backward() completes them.
  const std::vector<size_t>& backward_order() const { return backward_order_; }
  // BN running statistics, saved and loaded with the parameters.
  const std::vector<NamedBuffer>& buffers() const { return buffers_; }
  int64_t parameter_count() const;

  // FLOPs of one training image: forward + backward (input and weight gradients).
  double train_flops_per_image() const { return train_flops_; }
  double forward_flops_per_image() const { return forward_flops_; }
  // Bytes of activations and their gradients one training image keeps on the device, in fp32
  // (Layer::activation_floats): an estimate without layouts' padding or the backend's scratch,
  // so that a batch too large for memory is refused before any of it is allocated.
  int64_t activation_bytes_per_image() const { return activation_bytes_; }

  // Gradients given back as soon as they are used (Layer::set_transient_memory), and each
  // parameter's own gradient from the optimizer step that read it to its layer's next backward
  // (Parameter::grad_consumed; one bound into a fusion bucket stays); the backend's choice by
  // default (Backend::recycles_memory: cuda on, host backends off).
  void set_transient_memory(bool on);
  bool transient_memory() const { return transient_memory_; }

  // Residual blocks mask their input gradient with the ReLU below in the pass that sums it
  // (Sequential::set_fold_relu_backward): on by default, bitwise the same numbers.
  void set_fold_relu_backward(bool on) { net_->set_fold_relu_backward(on); }

  // Each convolution's timed choices, its weight-gradient path and its algorithm
  // (ConvOp::weight_grad_choice), as "name=choice,name=choice"; "" while none has chosen.
  // preset_weight_grad_choices takes such a string (the deck's, rank 0's, a checkpoint's) and makes
  // those choices; a name the model lacks is an InputError that begins with `source` (the deck key,
  // the file).
  std::string weight_grad_choices();
  void preset_weight_grad_choices(const std::string& choices, const std::string& source);
  // What measure timed for each convolution it decided, by name (ConvOp::weight_grad_times).
  std::vector<std::pair<std::string, backend::ConvOp::WeightGradTimes>> weight_grad_times();

  // Synchronized batch norm across ranks (see BatchNorm2d::set_stat_reducer).
  void set_stat_reducer(const backend::StatReducer& reducer) { net_->set_stat_reducer(reducer); }
  // Seconds of each top-level layer's forward and backward, for the timeline.
  void set_layer_timer(Sequential::LayerTimer timer) { net_->set_layer_timer(std::move(timer)); }

  // The inference forward pass appended to graph from value `input` (graph.hpp, for exporters):
  // the backbone, then the classifier or the inspection heads.
  TracedOutputs trace(Graph& graph, const std::string& input) const;

  // One float dataset per parameter and buffer, named as it is, in group.
  void save(h5::Group& group);
  // Reads what save() wrote; a missing tensor or a shape mismatch names the file and tensor.
  void load(const h5::Group& group);
  // Every buffer's values, in buffers() order, one after another (each rank's BN running
  // statistics differ: checkpoints keep them all, so a resume is bitwise).
  std::vector<float> buffer_values();
  void set_buffer_values(const std::vector<float>& values);

 private:
  // Transient memory: each owned gradient an optimizer step has read goes back (forward).
  void release_consumed_grads();

  std::string name_;
  Backend& be_;
  ModelInput input_;
  int classes_;
  std::unique_ptr<Sequential> net_;  // with inspection heads: the backbone before them
  HeadsSpec heads_;
  std::unique_ptr<InspectHeads> inspect_;
  std::vector<Parameter*> params_;
  std::vector<NamedBuffer> buffers_;
  std::vector<size_t> backward_order_;
  std::unordered_map<const Parameter*, size_t> index_;  // position in params_
  double forward_flops_ = 0, train_flops_ = 0;
  int64_t activation_bytes_ = 0;
  bool transient_memory_ = false;
  const Tensor* logits_ = nullptr;
  Tensor dlogits_;
};

// Known names: cnn_small, resnet18_cifar, fibernet. An unknown name or a data shape the
// model cannot take is an InputError. Weights are initialised as PyTorch does, from seed
// (each parameter's values depend on its name alone: the heads leave the backbone's as they are).
std::unique_ptr<Model> make_model(const std::string& name, const ModelInput& in, int classes,
                                  Backend& be, uint64_t seed, const HeadsSpec& heads = {});
const std::vector<std::string>& model_names();

// PyTorch's default initialisation: weights kaiming_uniform(a=sqrt(5)) and biases
// uniform(+-1/sqrt(fan_in)) for conv and linear, BN gamma 1, beta 0. Each parameter's
// random stream depends only on seed and its name.
void init_parameters(Model& model, uint64_t seed);

}  // namespace ringtrain::nn
