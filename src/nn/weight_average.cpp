// weight_average.cpp — WeightAverage: the averages' update through the backend's axpby, the
// swap of tensor handles, and the averages in a model group.
#include "ringtrain/nn/weight_average.hpp"

#include <algorithm>
#include <utility>

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {
namespace {

// Every tensor the average covers, in a fixed order.
std::vector<Tensor*> tensors_of(Model& model) {
  std::vector<Tensor*> all;
  for (Parameter* p : model.parameters()) all.push_back(&p->value);
  for (const NamedBuffer& b : model.buffers()) all.push_back(b.tensor);
  return all;
}

}  // namespace

WeightAverage::WeightAverage(Model& model, double decay) : model_(model), decay_(decay) {
  RT_REQUIRE_INPUT(decay > 0 && decay < 1, "train.ema_decay = ", decay, ": must be in (0, 1)");
  for (Tensor* t : tensors_of(model)) averages_.push_back(model.backend().alloc(t->shape()));
  reset();
}

void WeightAverage::reset() {
  RT_CHECK(!swapped_, "WeightAverage::reset while the averages are in the model");
  std::vector<Tensor*> current = tensors_of(model_);
  for (size_t i = 0; i < current.size(); ++i) model_.backend().copy(*current[i], averages_[i]);
  updates_ = 0;
}

double WeightAverage::next_decay() const {
  const double t = double(updates_);
  return std::min(decay_, (1.0 + t) / (10.0 + t));
}

void WeightAverage::update() {
  RT_CHECK(!swapped_, "WeightAverage::update while the averages are in the model");
  const float d = float(next_decay());
  Backend& be = model_.backend();
  std::vector<Tensor*> current = tensors_of(model_);
  for (size_t i = 0; i < current.size(); ++i) be.axpby(1.0f - d, *current[i], d, averages_[i]);
  ++updates_;
}

void WeightAverage::swap() {
  std::vector<Tensor*> current = tensors_of(model_);
  for (size_t i = 0; i < current.size(); ++i) std::swap(*current[i], averages_[i]);
  swapped_ = !swapped_;
}

void WeightAverage::save(h5::Group& group) {
  swap();
  model_.save(group);
  swap();
  group.set_attr("ema_decay", decay_);
  group.set_attr("ema_updates", int64_t(updates_));
}

void WeightAverage::load(const h5::Group& group) {
  swap();
  model_.load(group);
  swap();
  updates_ = group.attr<int64_t>("ema_updates");
}

}  // namespace ringtrain::nn
