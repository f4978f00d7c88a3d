// parameter.hpp — Parameter: a named trainable tensor, its gradient and its flags.
#pragma once

#include <string>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/tensor.hpp"

namespace ringtrain::nn {

using backend::Shape;
using backend::shape_str;
using backend::Tensor;

// What a parameter is, for initialisation.
enum class ParamRole { kWeight, kBias, kNormScale, kNormShift };

struct Parameter {
  std::string name;  // PyTorch-style: "layer2.0.conv1.weight"
  Shape shape;
  Tensor value;                  // plain fp32 on the device
  Tensor grad;                   // plain fp32, owned or a view into a fusion buffer; empty
                                 // between steps in transient memory (grad_consumed)
  bool no_weight_decay = false;  // BN parameters and biases
  ParamRole role = ParamRole::kWeight;
  int64_t fan_in = 0;  // inputs per output (conv: in*k*k), for initialisation

  int64_t numel() const { return backend::shape_numel(shape); }
  // Makes grad a view of external device memory (numel floats), e.g. a slot of a fusion
  // buffer, so backward writes the gradient straight into it. The memory must outlive
  // model's use of it.
  void bind_grad(float* external) { grad = Tensor::view(external, shape); }

  // Gradient accumulation: while `accumulating`, backward writes this micro-batch's gradient
  // into grad_scratch and the model adds it to grad (Model::backward), so grad sums the
  // micro-batches in fp32 where it lives (a fusion bucket).
  bool accumulating = false;
  Tensor grad_scratch;
  // Set by an optimizer step, which has read the gradient; cleared when a backward writes the
  // next one. Until then nobody needs it: in transient memory Model::forward gives an owned
  // gradient back (as PyTorch's zero_grad(set_to_none=True) frees .grad), so a step's
  // activations never share the device with the last step's gradients.
  bool grad_consumed = false;
  // Where a layer's backward writes the gradient of the current micro-batch; a gradient given
  // back since the last step is taken again here, at its own layer's backward.
  Tensor& grad_target(backend::Backend& be) {
    if (grad.empty()) grad = be.alloc(shape);
    grad_consumed = false;
    return accumulating ? grad_scratch : grad;
  }
};

// A named non-trainable tensor saved with the model (BN running statistics).
struct NamedBuffer {
  std::string name;
  Tensor* tensor;
};

}  // namespace ringtrain::nn
