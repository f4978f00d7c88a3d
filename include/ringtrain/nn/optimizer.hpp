// optimizer.hpp — the optimizers: SGD (momentum, Nesterov), LARS, LAMB and AdamW, one update
// rule per parameter through the backend, and their state in the checkpoint.
//
// SGD     buf = mu buf + (g + wd w); w -= lr (nesterov ? g + wd w + mu buf : buf)
// LARS    (You, Gitman, Ginsburg 2017) trust = eta |w| / (|g| + wd |w|);
//         m = mu m + lr trust (g + wd w); w -= m
// LAMB    (You et al. 2019) Adam's bias-corrected moments; r = mhat / (sqrt(vhat) + eps) + wd w;
//         w -= lr (|w| / |r|) r
// AdamW   (Loshchilov and Hutter 2019) w -= lr (mhat / (sqrt(vhat) + eps) + wd w)
// A trust ratio is 1 where either norm is 0. Batch-norm parameters and biases
// (Parameter::no_weight_decay) get neither weight decay nor a trust ratio, as in those papers'
// large-batch recipes, unless decay_bn_and_bias.
#pragma once

#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/nn/parameter.hpp"

namespace ringtrain::nn {

enum class OptimizerKind { kSgd, kLars, kLamb, kAdamW };
// "sgd", "lars", "lamb", "adamw"; an InputError naming train.optimizer otherwise.
OptimizerKind parse_optimizer(const std::string& name);
const char* optimizer_name(OptimizerKind kind);

struct OptimizerOptions {
  double momentum = 0.9;  // sgd, lars
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  // Weight decay (and a trust ratio) on BN parameters and biases too (off by default).
  bool decay_bn_and_bias = false;
  OptimizerKind kind = OptimizerKind::kSgd;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // lamb, adamw
  double trust_coef = 1e-3;                       // lars: eta
};

class Optimizer {
 public:
  Optimizer(std::vector<Parameter*> params, const OptimizerOptions& options, backend::Backend& be);
  // One update of every parameter from its gradient at learning rate lr.
  void step(double lr);
  int64_t steps() const { return steps_; }
  const OptimizerOptions& options() const { return options_; }
  // Each parameter's first moment (SGD, LARS: the momentum buffer), in the order of the
  // parameters given; the second moments (LAMB, AdamW; empty for the others).
  const std::vector<Tensor>& first_moments() const { return first_; }
  const std::vector<Tensor>& second_moments() const { return second_; }

  // The rule's name, the step count, the first moments (SGD, LARS: the momentum buffers) as a
  // dataset per parameter named as it, the second moments (LAMB, AdamW) in "second_moment".
  void save(h5::Group& group) const;
  // An InputError naming the file where it holds another rule's state.
  void load(const h5::Group& group);

 private:
  bool uses_second_moment() const;
  // Whether p takes the full treatment: weight decay (and LARS/LAMB's layer adaptation); a
  // batch-norm or bias parameter does not unless decay_bn_and_bias.
  bool fully_decayed(const Parameter& p) const;
  // optimizer.weight_decay where fully_decayed, else 0.
  float decay_of(const Parameter& p) const;

  std::vector<Parameter*> params_;
  OptimizerOptions options_;
  backend::Backend& be_;
  std::vector<Tensor> first_, second_;
  int64_t steps_ = 0;
};

}  // namespace ringtrain::nn
