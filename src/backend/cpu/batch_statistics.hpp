// batch_statistics.hpp — a batch's per-channel mean and biased variance by loops of ours over
// channel runs, for the cpu ops that normalise in their own passes. Internal to src/backend/cpu.
#pragma once

#include <vector>

#include "channel_runs.hpp"

namespace ringtrain::backend::cpu {

class BatchStatistics {
 public:
  // x [n, channels, h, w] (fp32 or bf16) in p's walkable layout; mean and var plain [channels],
  // allocated here. One pass about each channel's first value on one rank (fp64 sums per
  // plane); with a reducer the mean over every rank first, then the squares about it. Returns
  // the values per channel they cover, every rank's with a reducer.
  double compute(const Planes& p, int64_t channels, const Tensor& x, Tensor& mean, Tensor& var,
                 const StatReducer* reducer);

 private:
  template <typename T>
  double compute_of(const Planes& p, int64_t channels, const T* x, float* mean, float* var,
                    const StatReducer* reducer);
  template <typename T>
  void sums_about(const Planes& p, const T* x, const float* shift);

  std::vector<double> plane_sums_, totals_;
  std::vector<float> shift_, sums_;
};

}  // namespace ringtrain::backend::cpu
