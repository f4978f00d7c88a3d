// gradient_clip.cpp — GradientClipper: the global norm from the backend's fixed-order sums, the
// scaling, and each epoch's figures.
#include "ringtrain/train/gradient_clip.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

GradientClipper::GradientClipper(double clip_norm, std::vector<nn::Parameter*> params,
                                 backend::Backend& be)
    : clip_norm_(clip_norm), params_(std::move(params)), be_(be) {
  RT_CHECK(clip_norm > 0, "GradientClipper: clip_norm ", clip_norm);
  for (const nn::Parameter* p : params_) grads_.push_back(&p->grad);
}

double GradientClipper::apply() {
  const double norm = std::sqrt(be_.sum_of_squares(grads_));
  ++epoch_.steps;
  norm_sum_ += norm;
  epoch_.max_norm = std::max(epoch_.max_norm, norm);
  if (norm > clip_norm_) {
    const float factor = float(clip_norm_ / norm);
    for (nn::Parameter* p : params_) be_.scale(p->grad, factor);
    ++epoch_.clipped;
    ++clipped_total_;
  }
  return norm;
}

ClipFigures GradientClipper::take_epoch() {
  ClipFigures figures = epoch_;
  figures.mean_norm = epoch_.steps ? norm_sum_ / double(epoch_.steps) : 0.0;
  epoch_ = {};
  norm_sum_ = 0;
  return figures;
}

}  // namespace ringtrain::train
