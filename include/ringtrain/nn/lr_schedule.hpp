// lr_schedule.hpp — learning rate per step: linear warm-up, then cosine or step decay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::nn {

struct LRScheduleOptions {
  double base_lr = 0.1;
  int64_t warmup_steps = 0;  // lr rises linearly from warmup_start * base_lr
  double warmup_start = 0.0;
  int64_t total_steps = 1;          // cosine reaches min_lr here
  std::string decay = "cosine";     // "cosine", "step" or "constant"
  std::vector<int64_t> milestones;  // step decay: multiply by gamma at each of these steps
  double gamma = 0.1;
  double min_lr = 0.0;
};

// The linear scaling rule: base_lr * global_batch / base_batch.
double scaled_lr(double base_lr, int64_t global_batch, int64_t base_batch);

class LRSchedule {
 public:
  // Throws InputError on an unknown decay or inconsistent steps.
  explicit LRSchedule(const LRScheduleOptions& options);
  double lr(int64_t step) const;
  const LRScheduleOptions& options() const { return options_; }

 private:
  LRScheduleOptions options_;
};

}  // namespace ringtrain::nn
