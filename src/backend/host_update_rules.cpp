// host_update_rules.cpp — LARS, LAMB and AdamW on host memory (nn/optimizer.hpp gives the
// formulas and their sources); every reduction in fixed chunks, so OpenMP's thread count never
// changes a bit.
#include "host_update_rules.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ringtrain::backend::host {
namespace {

int64_t chunks_of(int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }

// sum over chunks c of chunk_sum(c, begin, end), each chunk's sum in fp64, added in order.
template <typename ChunkSum>
double sum_in_chunks(int64_t n, ChunkSum chunk_sum) {
  const int64_t chunks = chunks_of(n);
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    partial[size_t(c)] = chunk_sum(c * kSumChunk, std::min(n, (c + 1) * kSumChunk));
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// eta * |w| / (|g| + wd |w|) (You et al. 2017), 1 where either norm is 0 or adaptation is off.
float lars_trust_ratio(const float* w, const float* g, int64_t n, const AdaptiveSpec& s) {
  if (!s.layer_adaptation) return 1.0f;
  const double wn = std::sqrt(sum_of_squares(w, n)), gn = std::sqrt(sum_of_squares(g, n));
  if (wn <= 0 || gn <= 0) return 1.0f;
  return float(double(s.trust_coef) * wn / (gn + double(s.weight_decay) * wn));
}

// d = g + wd w; m = mu m + lr * trust * d; w -= m.
void lars(float* w, const float* g, float* m, int64_t n, const AdaptiveSpec& s) {
  const float local_lr = s.lr * lars_trust_ratio(w, g, n, s);
  const float mu = s.momentum, wd = s.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    m[i] = mu * m[i] + local_lr * d;
    w[i] -= m[i];
  }
}

struct AdamMoments {
  float b1, b2, bc1, bc2, eps;  // bias corrections 1 - beta^t
};

AdamMoments moments_of(const AdaptiveSpec& s) {
  const double t = double(s.step);
  return {s.beta1, s.beta2, float(1.0 - std::pow(double(s.beta1), t)),
          float(1.0 - std::pow(double(s.beta2), t)), s.eps};
}

// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; returns mhat / (sqrt(vhat) + eps).
inline float adam_direction(float g, float& m, float& v, const AdamMoments& a) {
  m = a.b1 * m + (1.0f - a.b1) * g;
  v = a.b2 * v + (1.0f - a.b2) * g * g;
  return (m / a.bc1) / (std::sqrt(v / a.bc2) + a.eps);
}

// w -= lr (mhat / (sqrt(vhat) + eps) + wd w) (Loshchilov and Hutter 2019: decay decoupled from
// the moments).
void adamw(float* w, const float* g, float* m, float* v, int64_t n, const AdaptiveSpec& s) {
  const AdamMoments a = moments_of(s);
  const float lr = s.lr, wd = s.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (adam_direction(g[i], m[i], v[i], a) + wd * w[i]);
}

// r = mhat / (sqrt(vhat) + eps) + wd w; w -= lr * (|w| / |r|) * r (You et al. 2019, LAMB;
// ratio 1 where a norm is 0 or adaptation is off). The moments are updated in the pass that
// sums |r|^2; the second pass recomputes r from them with the same expression.
void lamb(float* w, const float* g, float* m, float* v, int64_t n, const AdaptiveSpec& s) {
  const AdamMoments a = moments_of(s);
  const float wd = s.weight_decay;
  const double wn = s.layer_adaptation ? std::sqrt(sum_of_squares(w, n)) : 0.0;
  const double rr = sum_in_chunks(n, [&](int64_t begin, int64_t end) {
    double sum = 0;
    for (int64_t i = begin; i < end; ++i) {
      const float r = adam_direction(g[i], m[i], v[i], a) + wd * w[i];
      sum += double(r) * double(r);
    }
    return sum;
  });
  const double rn = std::sqrt(rr);
  const float trust = s.layer_adaptation && wn > 0 && rn > 0 ? float(wn / rn) : 1.0f;
  const float step = s.lr * trust;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    w[i] -= step * ((m[i] / a.bc1) / (std::sqrt(v[i] / a.bc2) + a.eps) + wd * w[i]);
}

}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  return sum_in_chunks(n, [x](int64_t begin, int64_t end) {
    double sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += double(x[i]) * double(x[i]);
    return sum;
  });
}

void adaptive_update(float* w, const float* g, float* m, float* v, int64_t n,
                     const AdaptiveSpec& s) {
  switch (s.rule) {
    case UpdateRule::kLars: return lars(w, g, m, n, s);
    case UpdateRule::kLamb: return lamb(w, g, m, v, n, s);
    case UpdateRule::kAdamW: return adamw(w, g, m, v, n, s);
  }
}

}  // namespace ringtrain::backend::host
