// loss_scale.hpp — LossScaler: the loss scale of fp16 training (dynamic or static), and the
// verdict on each step's gradients; pure host state, the same on every rank.
//
// The loss gradient is multiplied by the scale s before backward, so small fp16 gradients do not
// flush to zero; the reduction divides s out again with the mean (DataParallel). Dynamic scaling
// follows PyTorch's GradScaler: start at 2^16, halve on an overflow (the step is skipped on every
// rank), double after growth_interval clean steps in a row, here kept within [min, max].
#pragma once

#include <cstdint>

#include "ringtrain/config/config.hpp"

namespace ringtrain::train {

// The growth and backoff factors are PyTorch's; the clamps, kMinLossScale and kMaxLossScale
// (config.hpp), are ours.

struct LossScaleOptions {
  bool dynamic = true;             // false: a static scale, never changed
  double init = 65536.0;           // 2^16; in [kMinLossScale, kMaxLossScale]
  int64_t growth_interval = 2000;  // clean steps in a row before the scale doubles
  double growth = 2.0;
  double backoff = 0.5;
};

// What a step's gradients mean for the optimizer.
enum class ScaleVerdict {
  kStep,      // finite: take the step
  kOverflow,  // not finite, the scale backed off: skip the step (normal with dynamic scaling)
  kNonfinite  // not finite and the scale cannot back off (static, or at the floor): a real
              // NaN/inf, for train.on_nonfinite to decide
};

// What a checkpoint keeps of a dynamic scaler.
struct LossScaleState {
  double scale = 65536.0;
  int64_t clean_steps = 0;  // clean steps since the scale last changed
};

class LossScaler {
 public:
  // InputError unless init is within the clamps and growth_interval >= 1.
  explicit LossScaler(const LossScaleOptions& options);

  // The scale to multiply this step's loss gradient by (a power of two from a power-of-two init).
  double scale() const { return state_.scale; }
  bool dynamic() const { return options_.dynamic; }
  // Called once per optimizer step with whether every rank's gradients were finite.
  ScaleVerdict update(bool finite);

  int64_t overflow_steps() const { return overflow_steps_; }  // steps skipped as kOverflow
  LossScaleState state() const { return state_; }
  // A resumed run goes on with the checkpoint's scale and clean-step count (dynamic only;
  // a static scale is the deck's). InputError when they are out of range.
  void restore(const LossScaleState& state);

 private:
  LossScaleOptions options_;
  LossScaleState state_;
  int64_t overflow_steps_ = 0;
};

}  // namespace ringtrain::train
