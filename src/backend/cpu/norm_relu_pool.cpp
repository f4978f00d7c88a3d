// norm_relu_pool.cpp — a stem's batch norm + ReLU + max pool as loops of ours: the statistics
// and one pooled pass forward, two passes backward, where oneDNN 2.6's two primitives pass over
// the full-size tensor about twice as often and write it twice more (docs/TUNING.md).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "batch_statistics.hpp"
#include "lane_pack.hpp"
#include "norm_passes.hpp"
#include "ops.hpp"

namespace ringtrain::backend::cpu {
namespace {

// y = the largest of relu(a x + b) over each tile; winners = its place in the tile and
// winner_x = its x (so that backward's sums need not read x again). The values are compared as
// stored (bf16: rounded), so that of two that round alike the first wins, as the unfused pool
// chooses.
template <typename T, int N>
void pool_forward(const PooledPlanes& g, const T* x, const float* a, const float* b, T* y,
                  uint8_t* winners, T* winner_x) {
  using P = LanePack<N>;
  const int64_t L = g.x.lanes, k = g.k;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.count(); ++plane) {
    const int64_t img = g.image(plane), run = g.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const typename P::F pa = P::load(a + run * L + lp), pb = P::load(b + run * L + lp);
      // A NaN or inf anywhere in a channel makes its a or b NaN: its outputs are then NaN, so
      // that it reaches the loss as the unfused ops pass it on.
      const typename P::I poisoned = P::non_finite(pa) | P::non_finite(pb);
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          typename P::F best{}, best_x{};
          typename P::I won = P::splat_int(kNoWinner);
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const typename P::F xv = P::load(x + g.x.at(img, run, oh * k + i, ow * k + j) + lp);
              const typename P::F v = P::stored_finite(pa * xv + pb, x);
              const typename P::I wins = v > best;
              best = wins ? v : best;
              best_x = wins ? xv : best_x;
              won = wins ? P::splat_int(int32_t(i * k + j)) : won;
            }
          best = poisoned ? pa + pb : best;
          P::store(y + g.y.at(img, run, oh, ow) + lp, best);
          const int64_t tile = g.tile_at(plane, oh, ow) + lp;
          P::store_bytes(winners + tile, won);
          P::store(winner_x + tile, best_x);
        }
    }
  }
}

// Per plane and lane: sum dz and sum dz x-hat, x-hat = (x - mu) inv, where dz is dy at each
// tile's winner and 0 elsewhere: from the winners' x that forward kept, without reading x.
template <typename T, int N>
void gradient_plane_sums(const PooledPlanes& g, const T* dy, const uint8_t* winners,
                         const T* winner_x, const float* mu, const float* inv, double* out) {
  using P = LanePack<N>;
  const int64_t L = g.x.lanes;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.count(); ++plane) {
    const int64_t img = g.image(plane), run = g.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const typename P::F pm = P::load(mu + run * L + lp), pi = P::load(inv + run * L + lp);
      double* sums = plane_sums_at(out, g, plane, lp);
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        typename P::F sd{}, sdx{};
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t tile = g.tile_at(plane, oh, ow) + lp;
          const typename P::F d = P::load(dy + g.y.at(img, run, oh, ow) + lp);
          const typename P::F dz = P::keep(d, P::load_bytes(winners + tile) != int32_t(kNoWinner));
          sd += dz;
          sdx += dz * ((P::load(winner_x + tile) - pm) * pi);
        }
        P::add_lanes(sums, sd);
        P::add_lanes(sums + L, sdx);
      }
    }
  }
}

// dx = a (dz - sum dz / M - x-hat sum dz x-hat / M) as a dz - c1 - x-hat c2 at every pixel,
// -c1 - x-hat c2 in the rows and columns past the last whole tile; with kStream past the caches.
template <typename T, int N, bool kStream>
void input_gradient(const PooledPlanes& g, const T* x, const T* dy, const uint8_t* winners,
                    const InputGradCoefficients& q, T* dx) {
  using P = LanePack<N>;
  using F = typename P::F;
  const int64_t L = g.x.lanes;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.count(); ++plane) {
    const int64_t img = g.image(plane), run = g.run(plane);
    for (int64_t lp = 0; lp < L; lp += N) {
      const int64_t o = run * L + lp;
      const F a = P::load(q.ag + o), c1 = P::load(q.c1 + o), c2 = P::load(q.c2 + o);
      const F mu = P::load(q.mu + o), inv = P::load(q.inv + o);
      for_each_pooled_input<N>(
          g, plane, lp, dy, winners, [&](int64_t h, int64_t w, F dz, bool tiled) {
            const int64_t at = g.x.at(img, run, h, w) + lp;
            const F xc = (P::load(x + at) - mu) * inv * c2;
            P::template write<kStream>(dx + at, tiled ? a * dz - c1 - xc : -c1 - xc);
          });
    }
    if (kStream) P::stream_fence();
  }
}

class FusedNormReluMaxPool : public NormReluMaxPoolOp {
 public:
  FusedNormReluMaxPool(const Context& ctx, const NormReluMaxPoolSpec& spec,
                       std::unique_ptr<NormReluMaxPoolOp> composed, bool fuse)
      : ctx_(ctx), s_(spec), composed_(std::move(composed)), fuse_(fuse) {}

  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    last_ = plan_for(x);
    if (!counted_) {
      ++(last_ ? ctx_.norm_pool_count.fused : ctx_.norm_pool_count.composed);
      counted_ = true;
    }
    if (!last_) return composed_->forward_training(x, gamma, beta, y, mean, var, reducer);
    const PooledPlan& p = *last_;
    count_ = statistics_.compute(p.g, s_.channels, x, mean, var, reducer);
    ensure(y, {p.g.n, s_.channels, p.g.oh, p.g.ow}, p.y_md);
    const size_t tiles = size_t(p.g.tiles());
    winners_.resize(tiles);
    winner_x_.resize(tiles);  // fp32, or bf16 in the first half
    if (x.dtype() == DType::kBF16)
      normalise_and_pool(p, static_cast<const uint16_t*>(x.raw()), gamma, beta, mean, var,
                         static_cast<uint16_t*>(y.raw()));
    else
      normalise_and_pool(p, x.f32(), gamma, beta, mean, var, y.f32());
    return count_;
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    if (!last_) {
      composed_->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, reducer);
      return;
    }
    const PooledPlan& p = *last_;
    RT_CHECK(desc_of(x) == p.x_md, "batch norm + max pool: backward's x ", shape_str(x.shape()),
             " is not the last forward's");
    RT_CHECK(dy.shape() == Shape({p.g.n, s_.channels, p.g.oh, p.g.ow}),
             "batch norm + max pool: dy ", shape_str(dy.shape()),
             " does not match the pooled output");
    const memory d = as_layout(ctx_, dy, p.y_md, ctx_.call_scratch.dy, dy_reorder_);
    ensure(dx, x.shape(), p.x_md);
    const StatReducer* sync = reducer && *reducer ? reducer : nullptr;
    const bool stream = streams_output(dx.raw(), int64_t(dx.bytes()));
    if (x.dtype() == DType::kBF16)
      backward(p, static_cast<const uint16_t*>(x.raw()),
               static_cast<const uint16_t*>(d.get_data_handle()), gamma, mean, var,
               static_cast<uint16_t*>(dx.raw()), stream, dgamma, dbeta, sync);
    else
      backward(p, x.f32(), static_cast<const float*>(d.get_data_handle()), gamma, mean, var,
               dx.f32(), stream, dgamma, dbeta, sync);
  }

 private:
  // The plan for x's layout, or null where the loops do not walk it (the composed ops run).
  const PooledPlan* plan_for(const Tensor& x) {
    const int64_t k = s_.window;
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.channels, "batch norm + max pool: input ",
             shape_str(x.shape()), " does not have ", s_.channels, " channels");
    RT_CHECK(k >= 1 && k <= 15 && x.dim(2) >= k && x.dim(3) >= k, "batch norm + max pool: input ",
             shape_str(x.shape()), " is smaller than the ", k, "x", k, " window");
    return plans_.plan(desc_of(x), k, ctx_.pack_lanes, fuse_);
  }

  // y and the winners from the batch's statistics.
  template <typename T>
  void normalise_and_pool(const PooledPlan& p, const T* x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& mean, const Tensor& var, T* y) {
    const int64_t C = s_.channels;
    const float* a = per_lane(
        p.g.x, C, a_, [&](int64_t c) { return gamma.f32()[c] / std::sqrt(var.f32()[c] + s_.eps); });
    const float* b =
        per_lane(p.g.x, C, b_, [&](int64_t c) { return beta.f32()[c] - mean.f32()[c] * a[c]; });
    with_pack(p.g, [&](auto pack) {
      pool_forward<T, decltype(pack)::value>(p.g, x, a, b, y, winners_.data(),
                                             reinterpret_cast<T*>(winner_x_.data()));
    });
  }

  // dbeta = sum dz and dgamma = sum dz x-hat, this rank's own; the input gradient from those
  // sums over every rank (with a reducer), with stream past the caches (streams_output).
  template <typename T>
  void backward(const PooledPlan& p, const T* x, const T* dy, const Tensor& gamma,
                const Tensor& mean, const Tensor& var, T* dx, bool stream, Tensor& dgamma,
                Tensor& dbeta, const StatReducer* reducer) {
    gradient_.begin(p.g, mean, var, s_.eps);
    with_pack(p.g, [&](auto lanes) {
      gradient_plane_sums<T, decltype(lanes)::value>(
          p.g, dy, winners_.data(), reinterpret_cast<const T*>(winner_x_.data()), gradient_.mu(),
          gradient_.inv(), gradient_.plane_sums());
    });
    const InputGradCoefficients q = gradient_.finish(p.g, gamma, count_, dgamma, dbeta, reducer);
    with_pack(p.g, [&](auto lanes) {
      with_flag(stream, [&](auto s) {
        input_gradient<T, decltype(lanes)::value, decltype(s)::value>(p.g, x, dy, winners_.data(),
                                                                      q, dx);
      });
    });
  }

  const Context& ctx_;
  NormReluMaxPoolSpec s_;
  std::unique_ptr<NormReluMaxPoolOp> composed_;  // for layouts the loops do not walk
  bool fuse_;                                    // false: composed_ everywhere
  PooledPlans plans_;
  const PooledPlan* last_ = nullptr;  // the last forward's; null: it ran the composed ops
  bool counted_ = false;              // in ctx_.norm_pool_count
  std::vector<uint8_t> winners_;
  std::vector<float> winner_x_;
  BatchStatistics statistics_;
  NormGradientSums gradient_;  // the backward's sums and coefficients
  std::vector<float> a_, b_;   // per_lane's arrays
  double count_ = 0;           // M: the values per channel the statistics cover, every rank's
  CachedReorder dy_reorder_;
};

}  // namespace

std::unique_ptr<NormReluMaxPoolOp> make_norm_relu_max_pool(
    const Context& ctx, const NormReluMaxPoolSpec& spec,
    std::unique_ptr<NormReluMaxPoolOp> composed, bool fuse) {
  return std::make_unique<FusedNormReluMaxPool>(ctx, spec, std::move(composed), fuse);
}

}  // namespace ringtrain::backend::cpu
