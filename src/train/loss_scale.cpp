// loss_scale.cpp — LossScaler: growth after clean steps, backoff on overflow, clamps.
#include "ringtrain/train/loss_scale.hpp"

#include <algorithm>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

LossScaler::LossScaler(const LossScaleOptions& options) : options_(options) {
  RT_REQUIRE_INPUT(options.init >= kMinLossScale && options.init <= kMaxLossScale, "loss scale ",
                   options.init, ": must be from 1 to 2^24 (16777216)");
  RT_REQUIRE_INPUT(options.growth_interval >= 1, "loss scale growth interval ",
                   options.growth_interval, ": must be at least 1 step");
  state_.scale = options.init;
}

ScaleVerdict LossScaler::update(bool finite) {
  if (finite) {
    if (options_.dynamic && ++state_.clean_steps >= options_.growth_interval) {
      state_.scale = std::min(state_.scale * options_.growth, kMaxLossScale);
      state_.clean_steps = 0;
    }
    return ScaleVerdict::kStep;
  }
  state_.clean_steps = 0;
  if (!options_.dynamic || state_.scale <= kMinLossScale) return ScaleVerdict::kNonfinite;
  state_.scale = std::max(state_.scale * options_.backoff, kMinLossScale);
  ++overflow_steps_;
  return ScaleVerdict::kOverflow;
}

void LossScaler::restore(const LossScaleState& state) {
  if (!options_.dynamic) return;
  RT_REQUIRE_INPUT(
      state.scale >= kMinLossScale && state.scale <= kMaxLossScale && state.clean_steps >= 0,
      "checkpoint loss scale ", state.scale, " after ", state.clean_steps,
      " clean steps: out of range (scale 1 to 2^24, steps 0 or more)");
  state_ = state;
}

}  // namespace ringtrain::train
