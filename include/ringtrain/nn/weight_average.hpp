// weight_average.hpp — an exponential moving average of a model's weights and buffers (BN
// running statistics) for evaluation and the model file (train.ema_decay).
//
// After each update step: avg = d avg + (1 - d) w, with d = min(decay, (1 + t) / (10 + t)) and
// t the updates before this one, so the first updates follow the weights closely instead of
// holding the random initialisation for thousands of steps (the warm-up TensorFlow's
// ExponentialMovingAverage takes with num_updates). Every rank holds the same weights, so every
// rank holds the same averages of them without communicating.
#pragma once

#include <cstdint>
#include <vector>

#include "ringtrain/io/h5.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {

class WeightAverage {
 public:
  // The averages start as copies of the model's weights and buffers.
  WeightAverage(Model& model, double decay);
  // Starts again from the model's weights as they are now (a resume without averages).
  void reset();
  void update();
  // The d of the next update.
  double next_decay() const;
  int64_t updates() const { return updates_; }
  // Exchanges the model's weights and buffers with the averages (the tensors' handles: no copy);
  // a second call exchanges them back.
  void swap();
  bool swapped() const { return swapped_; }
  // The averages as Model::save writes weights (a group a model file can be loaded from), with
  // attributes "ema_decay" and "ema_updates".
  void save(h5::Group& group);
  void load(const h5::Group& group);

 private:
  Model& model_;
  double decay_;
  std::vector<Tensor> averages_;  // parameters()' values, then buffers()
  int64_t updates_ = 0;
  bool swapped_ = false;
};

}  // namespace ringtrain::nn
