// gradient_clip.hpp — clipping the reduced gradient to a global L2 norm (train.clip_norm).
//
// It runs after the allreduce, with the loss scale already undone, on the gradient every rank
// holds bitwise the same: every rank computes the same norm (fixed-order fp64 sums) and takes
// the same decision without another collective.
#pragma once

#include <cstdint>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/nn/parameter.hpp"

namespace ringtrain::train {

struct ClipFigures {
  double mean_norm = 0, max_norm = 0;  // of the gradient before clipping, over the steps
  int64_t steps = 0, clipped = 0;      // steps measured, steps clipped
};

class GradientClipper {
 public:
  GradientClipper(double clip_norm, std::vector<nn::Parameter*> params, backend::Backend& be);
  // The global norm before clipping; where it exceeds clip_norm every gradient is scaled by
  // clip_norm / norm.
  double apply();
  // The figures since the last call (an epoch's), and the run's clipped steps.
  ClipFigures take_epoch();
  int64_t clipped_total() const { return clipped_total_; }

 private:
  double clip_norm_;
  std::vector<nn::Parameter*> params_;
  std::vector<const backend::Tensor*> grads_;
  backend::Backend& be_;
  ClipFigures epoch_;
  double norm_sum_ = 0;
  int64_t clipped_total_ = 0;
};

}  // namespace ringtrain::train
