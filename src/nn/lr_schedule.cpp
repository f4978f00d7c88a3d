// lr_schedule.cpp — linear warm-up, then cosine, step or constant learning rate.
#include "ringtrain/nn/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

double scaled_lr(double base_lr, int64_t global_batch, int64_t base_batch) {
  RT_REQUIRE_INPUT(base_batch > 0, "optimizer.base_batch must be > 0, got ", base_batch);
  return base_lr * double(global_batch) / double(base_batch);
}

LRSchedule::LRSchedule(const LRScheduleOptions& o) : options_(o) {
  RT_REQUIRE_INPUT(o.decay == "cosine" || o.decay == "step" || o.decay == "constant", "lr decay '",
                   o.decay, "' is unknown: use cosine, step or constant");
  RT_REQUIRE_INPUT(o.base_lr > 0, "lr must be > 0, got ", o.base_lr);
  RT_REQUIRE_INPUT(o.warmup_steps >= 0, "warm-up steps must be >= 0, got ", o.warmup_steps);
  RT_REQUIRE_INPUT(o.decay != "cosine" || o.total_steps > o.warmup_steps,
                   "cosine decay needs more total steps (", o.total_steps, ") than warm-up steps (",
                   o.warmup_steps, ")");
  RT_REQUIRE_INPUT(std::is_sorted(o.milestones.begin(), o.milestones.end()),
                   "lr milestones must be increasing");
}

double LRSchedule::lr(int64_t step) const {
  const LRScheduleOptions& o = options_;
  if (step < o.warmup_steps) {
    double f = double(step) / double(o.warmup_steps);
    return o.base_lr * (o.warmup_start + (1.0 - o.warmup_start) * f);
  }
  if (o.decay == "cosine") {
    double t = double(std::min(step, o.total_steps) - o.warmup_steps);
    double span = double(o.total_steps - o.warmup_steps);
    return o.min_lr + (o.base_lr - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t / span));
  }
  if (o.decay == "step") {
    auto passed =
        std::upper_bound(o.milestones.begin(), o.milestones.end(), step) - o.milestones.begin();
    return o.base_lr * std::pow(o.gamma, double(passed));
  }
  return o.base_lr;
}

}  // namespace ringtrain::nn
