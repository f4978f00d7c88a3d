// norm_passes.hpp — a batch norm's own passes over channel runs once its statistics are known
// (batch_statistics.hpp): the normalised output, with or without its ReLU and a residual sum,
// and the backward's two passes. Internal to src/backend/cpu.
#pragma once

#include <vector>

#include "channel_runs.hpp"

namespace ringtrain::backend::cpu {

// y = a x + b per channel (per_lane's arrays over runs x lanes), as the forward computed it.
struct NormCoefficients {
  const float* a = nullptr;
  const float* b = nullptr;
};

// y = a x + b (+ the residual r where given: a residual block's sum), or with relu the same
// through max(., 0); a x + b rounded as y would store it (bf16: to nearest even) before the sum.
// x, r and y in p's walkable layout, of x's type. A channel whose a or b is NaN or inf (a NaN or
// inf in its x, a NaN gamma or beta) is a + b throughout, NaN where either is, as oneDNN's batch
// norm leaves it.
void normalise(const Planes& p, const Tensor& x, const void* residual, NormCoefficients n,
               bool relu, Tensor& y);

class NormBackward {
 public:
  // The backward of y = relu?(a x + b) with a = gamma inv, inv = 1 / sqrt(var + eps), b from
  // the batch's mean: dz = dy, or where `relu` is given dy where a x + b (as forward rounded
  // it) > 0 and 0 elsewhere; dbeta = sum dz and dgamma = sum dz x-hat, this rank's own (fp64
  // sums per plane, added in one order: the same bits at any thread count); then, from those
  // sums over every rank (a reducer) and `count` (the values per channel the statistics
  // covered, every rank's), dx = a (dz - sum dz / count - x-hat sum dz x-hat / count). x, dy
  // and dx in p's layout and x's type.
  void run(const Planes& p, const Tensor& x, const void* dy, const Tensor& gamma,
           const Tensor& mean, const Tensor& var, float eps, double count,
           const NormCoefficients* relu, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
           const StatReducer* reducer);

 private:
  template <typename T>
  void run_of(const Planes& p, const T* x, const T* dy, const Tensor& gamma, double count,
              const NormCoefficients* relu, T* dx, Tensor& dgamma, Tensor& dbeta,
              const StatReducer* reducer);

  std::vector<double> plane_sums_;
  std::vector<float> sums_, mu_, inv_, a_, c1_, c2_;  // per_lane's arrays
};

}  // namespace ringtrain::backend::cpu
