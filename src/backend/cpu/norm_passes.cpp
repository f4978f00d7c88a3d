// norm_passes.cpp — the batch norm's own passes: normalise (with or without ReLU), the
// backward's per-plane sums of dz and dz x-hat, and its input gradient, on GCC vector packs of
// channel lanes.
#include "norm_passes.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "lane_pack.hpp"

namespace ringtrain::backend::cpu {
namespace {

// a x + b as y stores it, for finite a and b: a NaN a or b may round to an inf or a -0 (one
// whose mantissa bits are all set carries through the exponent), so the loops below blend a
// channel whose a or b is not finite apart.
template <typename T, int N>
typename LanePack<N>::F affine(typename LanePack<N>::F pa, typename LanePack<N>::F xv,
                               typename LanePack<N>::F pb, const T* as_stored) {
  return LanePack<N>::stored_finite(pa * xv + pb, as_stored);
}

// y = a x + b (+ r), with kRelu max(that, 0); a x + b rounded as stored first (the numbers of a
// batch norm writing it, then the sum); a channel whose a or b is not finite gets a + b
// throughout (NaN for a NaN), as oneDNN's unfused batch norm passes it on.
template <typename T, int N, bool kRelu, bool kResidual, bool kStream>
void normalise_planes(const Planes& p, const T* x, const T* r, const float* a, const float* b,
                      T* y) {
  using P = LanePack<N>;
  const int64_t L = p.x.lanes;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < p.count(); ++plane) {
    const int64_t img = p.image(plane), run = p.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const typename P::F pa = P::load(a + run * L + lp), pb = P::load(b + run * L + lp);
      const typename P::I poisoned = P::non_finite(pa) | P::non_finite(pb);
      for (int64_t h = 0; h < p.h; ++h)
        for (int64_t w = 0; w < p.w; ++w) {
          const int64_t at = p.x.at(img, run, h, w) + lp;
          typename P::F v = affine<T, N>(pa, P::load(x + at), pb, x);
          if (kResidual) v += P::load(r + at);
          v = poisoned ? pa + pb : v;
          if (kRelu) v = v < 0.0f ? typename P::F{} : v;  // a NaN stays NaN
          // Without a sum v is as stored already (or a NaN that keeps its quiet bit).
          if (kResidual)
            P::template write<kStream>(y + at, v);
          else
            P::template write_as_stored<kStream>(y + at, v);
        }
    }
    if (kStream) P::stream_fence();
  }
}

// dz: dy, or (kRelu) dy where forward's a x + b was > 0.
template <typename T, int N, bool kRelu>
typename LanePack<N>::F masked(typename LanePack<N>::F d, typename LanePack<N>::F xv,
                               typename LanePack<N>::F pa, typename LanePack<N>::F pb,
                               const T* as_stored) {
  if (!kRelu) return d;
  return LanePack<N>::keep(d, affine<T, N>(pa, xv, pb, as_stored) > 0.0f);
}

// Per plane and lane: sum dz and sum dz x-hat, x-hat = (x - mu) inv (plane_sums_at's layout);
// fp32 over about kPixelsPerFp32Sum pixels at a time, then fp64.
template <typename T, int N, bool kRelu>
void gradient_plane_sums(const Planes& p, const T* x, const T* dy, const float* mu,
                         const float* inv, NormCoefficients n, double* out) {
  using P = LanePack<N>;
  using F = typename P::F;
  const int64_t L = p.x.lanes, rows = std::max<int64_t>(1, kPixelsPerFp32Sum / p.w);
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < p.count(); ++plane) {
    const int64_t img = p.image(plane), run = p.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const int64_t o = run * L + lp;
      const F pm = P::load(mu + o), pi = P::load(inv + o);
      const F pa = kRelu ? P::load(n.a + o) : F{}, pb = kRelu ? P::load(n.b + o) : F{};
      double* sums = plane_sums_at(out, p, plane, lp);
      for (int64_t h0 = 0; h0 < p.h; h0 += rows) {
        F sd{}, sdx{};
        for (int64_t h = h0; h < std::min(p.h, h0 + rows); ++h)
          for (int64_t w = 0; w < p.w; ++w) {
            const int64_t at = p.x.at(img, run, h, w) + lp;
            const F xv = P::load(x + at);
            const F dz = masked<T, N, kRelu>(P::load(dy + at), xv, pa, pb, x);
            sd += dz;
            sdx += dz * ((xv - pm) * pi);
          }
        P::add_lanes(sums, sd);
        P::add_lanes(sums + L, sdx);
      }
    }
  }
}

template <typename T, int N, bool kRelu, bool kStream>
void input_gradient(const Planes& p, const T* x, const T* dy, const InputGradCoefficients& q,
                    NormCoefficients n, T* dx) {
  using P = LanePack<N>;
  using F = typename P::F;
  const int64_t L = p.x.lanes;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < p.count(); ++plane) {
    const int64_t img = p.image(plane), run = p.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const int64_t o = run * L + lp;
      const F ag = P::load(q.ag + o), c1 = P::load(q.c1 + o), c2 = P::load(q.c2 + o);
      const F mu = P::load(q.mu + o), inv = P::load(q.inv + o);
      const F pa = kRelu ? P::load(n.a + o) : F{}, pb = kRelu ? P::load(n.b + o) : F{};
      for (int64_t h = 0; h < p.h; ++h)
        for (int64_t w = 0; w < p.w; ++w) {
          const int64_t at = p.x.at(img, run, h, w) + lp;
          const F xv = P::load(x + at);
          const F dz = masked<T, N, kRelu>(P::load(dy + at), xv, pa, pb, x);
          P::template write<kStream>(dx + at, ag * dz - c1 - (xv - mu) * inv * c2);
        }
    }
    if (kStream) P::stream_fence();
  }
}

// f(std::integral_constant<int, N>, std::bool_constant<relu>) at the pack width p allows.
template <typename F>
void with_pack_and_relu(const Planes& p, bool relu, F&& f) {
  with_pack(p, [&](auto pack) {
    if (relu)
      f(pack, std::true_type());
    else
      f(pack, std::false_type());
  });
}

}  // namespace

void normalise(const Planes& p, const Tensor& x, const void* residual, NormCoefficients n,
               bool relu, Tensor& y) {
  const auto run = [&](auto pack, auto r, auto sum, auto stream) {
    constexpr int N = decltype(pack)::value;
    constexpr bool R = decltype(r)::value, S = decltype(sum)::value;
    constexpr bool W = decltype(stream)::value;
    if (x.dtype() == DType::kBF16)
      normalise_planes<uint16_t, N, R, S, W>(p, static_cast<const uint16_t*>(x.raw()),
                                             static_cast<const uint16_t*>(residual), n.a, n.b,
                                             static_cast<uint16_t*>(y.raw()));
    else
      normalise_planes<float, N, R, S, W>(p, x.f32(), static_cast<const float*>(residual), n.a, n.b,
                                          y.f32());
  };
  const bool stream = streams_output(y.raw(), int64_t(y.bytes()));
  with_pack_and_relu(p, relu, [&](auto pack, auto r) {
    with_flag(residual != nullptr,
              [&](auto sum) { with_flag(stream, [&](auto s) { run(pack, r, sum, s); }); });
  });
}

void NormGradientSums::begin(const Planes& p, const Tensor& mean, const Tensor& var, float eps) {
  const int64_t C = mean.numel();
  per_lane(p.x, C, mu_, [&](int64_t c) { return mean.f32()[c]; });
  per_lane(p.x, C, inv_, [&](int64_t c) { return 1.0f / std::sqrt(var.f32()[c] + eps); });
  plane_sums_.assign(size_t(p.count() * p.x.lanes * 2), 0.0);
}

InputGradCoefficients NormGradientSums::finish(const Planes& p, const Tensor& gamma, double count,
                                               Tensor& dgamma, Tensor& dbeta,
                                               const StatReducer* reducer) {
  const int64_t C = gamma.numel();
  sums_.resize(size_t(2 * C));
  channel_totals(plane_sums_, p, totals_);
  const int64_t width = p.x.runs * p.x.lanes;
  for (int64_t c = 0; c < C; ++c) {
    dbeta.f32()[c] = sums_[size_t(C + c)] = float(totals_[size_t(c)]);
    dgamma.f32()[c] = sums_[size_t(c)] = float(totals_[size_t(width + c)]);
  }
  if (reducer && *reducer) (*reducer)(sums_.data(), sums_.size());
  const float* ag = per_lane(p.x, C, ag_, [&](int64_t c) { return gamma.f32()[c] * inv_[c]; });
  per_lane(p.x, C, c1_, [&](int64_t c) { return float(ag[c] * sums_[size_t(C + c)] / count); });
  per_lane(p.x, C, c2_, [&](int64_t c) { return float(ag[c] * sums_[size_t(c)] / count); });
  return {ag, c1_.data(), c2_.data(), mu_.data(), inv_.data()};
}

void NormBackward::run(const Planes& p, const Tensor& x, const void* dy, const Tensor& gamma,
                       const Tensor& mean, const Tensor& var, float eps, double count,
                       const NormCoefficients* relu, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                       const StatReducer* reducer) {
  sums_.begin(p, mean, var, eps);
  const bool stream = streams_output(dx.raw(), int64_t(dx.bytes()));
  if (x.dtype() == DType::kBF16)
    run_of(p, static_cast<const uint16_t*>(x.raw()), static_cast<const uint16_t*>(dy), gamma, count,
           relu, static_cast<uint16_t*>(dx.raw()), stream, dgamma, dbeta, reducer);
  else
    run_of(p, x.f32(), static_cast<const float*>(dy), gamma, count, relu, dx.f32(), stream, dgamma,
           dbeta, reducer);
}

template <typename T>
void NormBackward::run_of(const Planes& p, const T* x, const T* dy, const Tensor& gamma,
                          double count, const NormCoefficients* relu, T* dx, bool stream,
                          Tensor& dgamma, Tensor& dbeta, const StatReducer* reducer) {
  const NormCoefficients n = relu ? *relu : NormCoefficients{};
  with_pack_and_relu(p, relu != nullptr, [&](auto pack, auto r) {
    gradient_plane_sums<T, decltype(pack)::value, decltype(r)::value>(
        p, x, dy, sums_.mu(), sums_.inv(), n, sums_.plane_sums());
  });
  const InputGradCoefficients q = sums_.finish(p, gamma, count, dgamma, dbeta, reducer);
  with_pack_and_relu(p, relu != nullptr, [&](auto pack, auto r) {
    with_flag(stream, [&](auto s) {
      input_gradient<T, decltype(pack)::value, decltype(r)::value, decltype(s)::value>(p, x, dy, q,
                                                                                       n, dx);
    });
  });
}

}  // namespace ringtrain::backend::cpu
