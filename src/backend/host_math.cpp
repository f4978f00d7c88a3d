// host_math.cpp — loss, SGD and elementwise loops on host memory (OpenMP).
#include "host_math.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ringtrain/core/bf16.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::host {

void check_same_numel(const char* op, const Tensor& a, const Tensor& b) {
  RT_CHECK(a.numel() == b.numel(), op, ": tensors ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), " differ in size");
}

LossResult softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t n,
                                 int64_t classes, float* dlogits, float smoothing) {
  for (int64_t i = 0; i < n; ++i)
    RT_CHECK(labels[i] >= 0 && labels[i] < classes, "label ", labels[i], " of image ", i,
             " is outside [0, ", classes, ")");
  LossResult result;
  result.count = n;
  double loss = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* z = logits + i * classes;
    float* dz = dlogits + i * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k)
      if (z[k] > z[best]) best = k;
    double total = 0;
    for (int64_t k = 0; k < classes; ++k) total += std::exp(double(z[k]) - z[best]);
    double log_total = std::log(total);
    // -log p_k = log_total - (z_k - z_best); the smoothed targets weigh every class.
    double mean_nll = 0;
    for (int64_t k = 0; k < classes; ++k) mean_nll += log_total - (double(z[k]) - z[best]);
    loss += (1.0 - smoothing) * (log_total - (double(z[labels[i]]) - z[best])) +
            double(smoothing) * mean_nll / double(classes);
    correct += best == labels[i];
    const double floor = double(smoothing) / double(classes);
    for (int64_t k = 0; k < classes; ++k) {
      double p = std::exp(double(z[k]) - z[best] - log_total);
      double t = floor + (k == labels[i] ? 1.0 - smoothing : 0.0);
      dz[k] = float((p - t) / double(n));
    }
  }
  result.loss = loss / double(n);
  result.correct = correct;
  return result;
}

// log(1 + e^-|z|) + max(z, 0) - z t: no overflow for any z, and exact where s(z) rounds to 1.
double sigmoid_binary_cross_entropy(const float* logits, const float* targets, int64_t count,
                                    float grad_weight, float* dlogits) {
  double loss = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double z = logits[i], t = targets[i];
    RT_CHECK(t >= 0 && t <= 1, "binary target ", t, " of value ", i, " is outside [0, 1]");
    loss += std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::abs(z)));
    const double s = 1.0 / (1.0 + std::exp(-z));
    dlogits[i] = float(double(grad_weight) * (s - t) / double(count));
  }
  return count > 0 ? loss / double(count) : 0.0;
}

void sgd_update(float* w, const float* g, float* buf, int64_t n, const SgdSpec& s) {
  const float lr = s.lr, mu = s.momentum, wd = s.weight_decay;
  const bool nesterov = s.nesterov;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + wd * w[i];
    float b = mu * buf[i] + d;
    buf[i] = b;
    w[i] -= lr * (nesterov ? d + mu * b : b);
  }
}

void fill(float* t, int64_t n, float value) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) t[i] = value;
}

void axpby(float a, const float* x, float b, float* y, int64_t n) {
  if (x == nullptr) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = b * y[i];
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

void relu_backward_of_sum(const float* y, const float* a, const float* b, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = (a[i] + b[i]) * (y[i] > 0.0f ? 1.0f : 0.0f);
}

void relu_backward_of_sum(const uint16_t* y, const uint16_t* a, const uint16_t* b, uint16_t* dx,
                          int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float sum = round_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
    dx[i] = float_to_bf16(sum * (bf16_to_float(y[i]) > 0.0f ? 1.0f : 0.0f));
  }
}

bool all_finite(const float* t, int64_t n) {
  // x - x is 0 for every finite x and NaN for NaN and +-inf: one pass, no branches.
  float sum = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += t[i] - t[i];
  return sum == 0.0f;
}

}  // namespace ringtrain::backend::host
