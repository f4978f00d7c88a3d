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

// The per-lane coefficients of a batch norm's input gradient, dx = ag dz - c1 - (x - mu) inv c2.
struct InputGradCoefficients {
  const float *ag, *c1, *c2, *mu, *inv;
};

// What a batch norm's backward computes between its two passes (ours here and the stem's,
// norm_relu_pool.cpp): mu and inv = 1 / sqrt(var + eps) per lane for the sums pass, which adds
// into plane_sums (plane_sums_at's layout: sum dz, sum dz x-hat); then dbeta = sum dz and dgamma =
// sum dz x-hat, this rank's own, and from those sums over every rank (a reducer) and `count`
// (the values per channel the statistics covered, every rank's) the input gradient's
// coefficients: ag = gamma inv, c1 = ag sum dz / count, c2 = ag sum dz x-hat / count.
class NormGradientSums {
 public:
  void begin(const Planes& p, const Tensor& mean, const Tensor& var, float eps);
  const float* mu() const { return mu_.data(); }
  const float* inv() const { return inv_.data(); }
  double* plane_sums() { return plane_sums_.data(); }
  InputGradCoefficients finish(const Planes& p, const Tensor& gamma, double count, Tensor& dgamma,
                               Tensor& dbeta, const StatReducer* reducer);

 private:
  std::vector<double> plane_sums_, totals_;
  std::vector<float> sums_, mu_, inv_, ag_, c1_, c2_;  // per_lane's arrays but sums_
};

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
  // stream: dx is written past the caches (streams_output).
  template <typename T>
  void run_of(const Planes& p, const T* x, const T* dy, const Tensor& gamma, double count,
              const NormCoefficients* relu, T* dx, bool stream, Tensor& dgamma, Tensor& dbeta,
              const StatReducer* reducer);

  NormGradientSums sums_;
};

}  // namespace ringtrain::backend::cpu
