// batch_statistics.cpp — BatchStatistics: per-plane fp64 sums from fp32 row sums, added per
// channel in one order.
#include "batch_statistics.hpp"

#include <omp.h>

#include <algorithm>

#include "lane_pack.hpp"

namespace ringtrain::backend::cpu {
namespace {

// Per plane and lane: sum (x - shift) and sum (x - shift)^2 (plane_sums_at's layout).
template <typename T, int N>
void plane_sums(const Planes& p, const T* x, const float* shift, double* out) {
  using P = LanePack<N>;
  const int64_t L = p.x.lanes, rows = std::max<int64_t>(1, kPixelsPerFp32Sum / p.w);
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < p.count(); ++plane) {
    const int64_t img = p.image(plane), run = p.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const typename P::F k = P::load(shift + run * L + lp);
      double* sums = plane_sums_at(out, p, plane, lp);
      for (int64_t h0 = 0; h0 < p.h; h0 += rows) {
        typename P::F s1{}, s2{};
        for (int64_t h = h0; h < std::min(p.h, h0 + rows); ++h)
          for (int64_t w = 0; w < p.w; ++w) {
            const typename P::F v = P::load(x + p.x.at(img, run, h, w) + lp) - k;
            s1 += v;
            s2 += v * v;
          }
        P::add_lanes(sums, s1);
        P::add_lanes(sums + L, s2);
      }
    }
  }
}

}  // namespace

double BatchStatistics::compute(const Planes& p, int64_t channels, const Tensor& x, Tensor& mean,
                                Tensor& var, const StatReducer* reducer) {
  ensure_vector(mean, channels);
  ensure_vector(var, channels);
  const StatReducer* sync = reducer && *reducer ? reducer : nullptr;
  if (x.dtype() == DType::kBF16)
    return compute_of(p, channels, static_cast<const uint16_t*>(x.raw()), mean.f32(), var.f32(),
                      sync);
  return compute_of(p, channels, x.f32(), mean.f32(), var.f32(), sync);
}

template <typename T>
void BatchStatistics::sums_about(const Planes& p, const T* x, const float* shift) {
  plane_sums_.assign(size_t(p.count() * p.x.lanes * 2), 0.0);
  with_pack(
      p, [&](auto pack) { plane_sums<T, decltype(pack)::value>(p, x, shift, plane_sums_.data()); });
}

template <typename T>
double BatchStatistics::compute_of(const Planes& p, int64_t channels, const T* x, float* mean,
                                   float* var, const StatReducer* reducer) {
  const int64_t C = channels, L = p.x.lanes, width = p.x.runs * L;
  const auto total = [&](int64_t c, int which) { return totals_[size_t(which * width + c)]; };
  if (!reducer) {
    const float* shift = per_lane(
        p.x, C, shift_, [&](int64_t c) { return value_at(x + p.x.at(0, c / L, 0, 0) + c % L); });
    sums_about(p, x, shift);
    channel_totals(plane_sums_, p, totals_);
    const double count = double(p.n * p.h * p.w);
    for (int64_t c = 0; c < C; ++c) {
      const double d = total(c, 0) / count;
      const double spread = total(c, 1) / count - d * d;
      mean[c] = float(shift[c] + d);
      var[c] = float(spread < 0 ? 0.0 : spread);  // rounding's negatives to 0; NaN stays NaN
    }
    return count;
  }
  sums_about(p, x, per_lane(p.x, C, shift_, [](int64_t) { return 0.0f; }));
  channel_totals(plane_sums_, p, totals_);
  sums_.resize(size_t(C + 1));
  for (int64_t c = 0; c < C; ++c) sums_[c] = float(total(c, 0));
  sums_[C] = float(p.n * p.h * p.w);
  (*reducer)(sums_.data(), sums_.size());
  const double count = sums_[C];
  for (int64_t c = 0; c < C; ++c) mean[c] = float(sums_[c] / count);
  sums_about(p, x, per_lane(p.x, C, shift_, [&](int64_t c) { return mean[c]; }));
  channel_totals(plane_sums_, p, totals_);
  for (int64_t c = 0; c < C; ++c) sums_[c] = float(total(c, 1));
  (*reducer)(sums_.data(), size_t(C));
  for (int64_t c = 0; c < C; ++c) var[c] = float(sums_[c] / count);
  return count;
}

}  // namespace ringtrain::backend::cpu
