// view_average.hpp — test-time augmentation in evaluation (data.tta): a batch's class and
// inspection-head probabilities averaged over views of its images, and the loss and accuracy
// of those averages.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/data/augment.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::train {

struct ViewProbabilities {
  std::vector<double> classes;              // n * classes: softmax, averaged
  std::array<std::vector<double>, 3> heads;  // nn::Head order: sigmoid, averaged (inspect only)
};

// images: n normalised [C, H, W] images on the host (shape {n, C, H, W}); input: device memory
// for one view, reused.
ViewProbabilities average_over_views(nn::Model& model, backend::Backend& be,
                                     const std::vector<float>& images, const backend::Shape& shape,
                                     const std::vector<data::AugmentParams>& views,
                                     backend::Tensor& input);

// Mean -log p(label) of averaged probabilities and how many have their largest at the label.
backend::LossResult loss_of_probabilities(const std::vector<double>& probs, const int32_t* labels,
                                          int64_t n, int64_t classes);

// Mean binary cross-entropy of averaged probabilities against 0/1 targets.
double bce_of_probabilities(const std::vector<double>& probs, const float* targets);

}  // namespace ringtrain::train
