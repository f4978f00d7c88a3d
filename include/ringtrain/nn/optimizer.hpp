// optimizer.hpp — SGD with momentum, Nesterov and weight decay, through the backend's op.
#pragma once

#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/nn/parameter.hpp"

namespace ringtrain::nn {

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  // Weight decay on BN parameters and biases too (off by default, as is usual).
  bool decay_bn_and_bias = false;
};

class Sgd {
 public:
  Sgd(std::vector<Parameter*> params, const SgdOptions& options, backend::Backend& be);
  // One update of every parameter from its gradient at learning rate lr.
  void step(double lr);
  int64_t steps() const { return steps_; }
  const SgdOptions& options() const { return options_; }

  // Momentum buffers (one dataset per parameter, named as it) and the step count.
  void save(h5::Group& group) const;
  void load(const h5::Group& group);

 private:
  std::vector<Parameter*> params_;
  SgdOptions options_;
  backend::Backend& be_;
  std::vector<Tensor> momentum_;
  int64_t steps_ = 0;
};

}  // namespace ringtrain::nn
