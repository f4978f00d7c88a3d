// conv_case.hpp — what the cpu convolution path tests share: a case (spec and input shape), the
// cpu backend on a given weight-gradient path or a skip, and a convolution's input and filter
// in the layouts oneDNN chooses in training.
#pragma once

#include <cstdio>
#include <memory>

#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"

namespace rt_test {

struct ConvCase {
  ringtrain::backend::ConvSpec spec;
  ringtrain::backend::Shape x_shape;
};

// "<precision> conv I->O kK sS pP, x [shape]", before a case's comparison lines.
inline void print_conv_case(const char* precision, const ConvCase& c) {
  std::printf("%s conv %d->%d k%d s%d p%d, x %s\n", precision, c.spec.in_channels,
              c.spec.out_channels, c.spec.kernel, c.spec.stride, c.spec.padding,
              ringtrain::backend::shape_str(c.x_shape).c_str());
}

// The cpu backend (2 threads) on `path` and `algorithm`, or null (reason printed) where bf16 is
// refused on this CPU.
inline std::unique_ptr<ringtrain::backend::Backend> cpu_or_skip(
    ringtrain::backend::Precision precision, ringtrain::backend::ConvWeightGrad path,
    ringtrain::backend::ConvAlgorithm algorithm = ringtrain::backend::ConvAlgorithm::kDirect) {
  try {
    return ringtrain::backend::make_backend("cpu", 2, precision, path, algorithm);
  } catch (const ringtrain::InputError& e) {
    std::printf("skipped: %s\n", e.what());
    return nullptr;
  }
}

// A convolution's input x, the output of a 1x1 convolution before it (so x comes in the layout
// oneDNN chose, as in training), and its filter w, both seeded from `seed`.
struct ConvInputs {
  ringtrain::backend::Tensor x, w;
};
inline ConvInputs conv_inputs_as_in_training(ringtrain::backend::Backend& be, const ConvCase& c,
                                             uint64_t seed) {
  const ringtrain::backend::ConvSpec& s = c.spec;
  const int in = s.in_channels;
  auto first = be.make_conv({in, in, 1, 1, 0, false, false});
  ringtrain::backend::Tensor x0 = random_tensor(be, c.x_shape, seed);
  ringtrain::backend::Tensor w0 = random_tensor(be, {in, in, 1, 1}, seed + 1, -0.5f, 0.5f);
  ConvInputs out;
  out.w = random_tensor(be, {s.out_channels, in, s.kernel, s.kernel}, seed + 2, -0.3f, 0.3f);
  first->forward(x0, w0, nullptr, out.x);
  return out;
}

}  // namespace rt_test
