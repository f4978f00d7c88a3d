// max_pool_relu.cpp — a max pool and the ReLU after it as loops of ours: one pass forward that
// keeps each tile's winner, one pass backward that writes the input gradient whole, where
// oneDNN 2.6's pool and ReLU take four passes and its pool's backward writes the full-size
// gradient twice (zeros, then the winners; docs/TUNING.md).
#include <omp.h>

#include <vector>

#include "channel_runs.hpp"
#include "lane_pack.hpp"
#include "ops.hpp"

namespace ringtrain::backend::cpu {
namespace {

// y = max(0, the largest x of each tile), winners (unless null: inference) = its place in the
// tile, or kNoWinner where no value is above 0. Of equal values the first wins and a NaN never
// does, as oneDNN's pool, cuDNN's (CUDNN_NOT_PROPAGATE_NAN) and the reference's choose: the same
// outputs as the two ops, NaN or not.
template <typename T, int N>
void pool_forward(const PooledPlanes& g, const T* x, T* y, uint8_t* winners) {
  using P = LanePack<N>;
  using F = typename P::F;
  using I = typename P::I;
  const int64_t L = g.x.lanes, k = g.k;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.count(); ++plane) {
    const int64_t img = g.image(plane), run = g.run(plane);
    for (int64_t lp = 0; lp < L; lp += N)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          F best{};
          I won = P::splat_int(kNoWinner);
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const F v = P::load(x + g.x.at(img, run, oh * k + i, ow * k + j) + lp);
              const I wins = v > best;
              best = wins ? v : best;
              won = wins ? P::splat_int(int32_t(i * k + j)) : won;
            }
          P::store(y + g.y.at(img, run, oh, ow) + lp, best);
          if (winners) P::store_bytes(winners + g.tile_at(plane, oh, ow) + lp, won);
        }
  }
}

// dx = dy at each tile's winner, 0 elsewhere and in the rows and columns past the last whole
// tile; with kStream past the caches.
template <typename T, int N, bool kStream>
void input_gradient(const PooledPlanes& g, const T* dy, const uint8_t* winners, T* dx) {
  using P = LanePack<N>;
  using F = typename P::F;
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.count(); ++plane) {
    const int64_t img = g.image(plane), run = g.run(plane);
    for (int64_t lp = 0; lp < g.x.lanes; lp += N)
      for_each_pooled_input<N>(g, plane, lp, dy, winners, [&](int64_t h, int64_t w, F dz, bool) {
        P::template write<kStream>(dx + g.x.at(img, run, h, w) + lp, dz);
      });
    if (kStream) P::stream_fence();
  }
}

class FusedMaxPoolRelu : public PoolOp {
 public:
  FusedMaxPoolRelu(const Context& ctx, int window, std::unique_ptr<PoolOp> composed, bool fuse)
      : ctx_(ctx), window_(window), composed_(std::move(composed)), fuse_(fuse) {}

  void forward(const Tensor& x, Tensor& y, bool training) override {
    const PooledPlan* p = plan_for(x);
    if (!counted_) {
      ++(p ? ctx_.pool_relu_count.fused : ctx_.pool_relu_count.composed);
      counted_ = true;
    }
    if (training) last_ = p, trained_ = true;
    if (!p) {
      composed_->forward(x, y, training);
      return;
    }
    ensure(y, {p->g.n, x.dim(1), p->g.oh, p->g.ow}, p->y_md);
    if (training) winners_.resize(size_t(p->g.tiles()));
    uint8_t* winners = training ? winners_.data() : nullptr;  // inference keeps the last step's
    with_pack(p->g, [&](auto pack) {
      if (x.dtype() == DType::kBF16)
        pool_forward<uint16_t, decltype(pack)::value>(p->g, static_cast<const uint16_t*>(x.raw()),
                                                      static_cast<uint16_t*>(y.raw()), winners);
      else
        pool_forward<float, decltype(pack)::value>(p->g, x.f32(), y.f32(), winners);
    });
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    RT_CHECK(trained_, "max pool + ReLU: backward before a training forward");
    if (!last_) {
      composed_->backward(dy, dx);
      return;
    }
    const PooledPlan& p = *last_;
    RT_CHECK(dy.shape() == Shape({p.g.n, p.channels, p.g.oh, p.g.ow}), "max pool + ReLU: dy ",
             shape_str(dy.shape()), " does not match the pooled output");
    const memory d = as_layout(ctx_, dy, p.y_md, ctx_.call_scratch.dy, dy_reorder_);
    ensure(dx, {p.g.n, p.channels, p.g.h, p.g.w}, p.x_md);
    const bool stream = streams_output(dx.raw(), int64_t(dx.bytes()));
    with_pack(p.g, [&](auto pack) {
      with_flag(stream, [&](auto s) {
        constexpr int kN = decltype(pack)::value;
        constexpr bool kS = decltype(s)::value;
        if (dx.dtype() == DType::kBF16)
          input_gradient<uint16_t, kN, kS>(p.g, static_cast<const uint16_t*>(d.get_data_handle()),
                                           winners_.data(), static_cast<uint16_t*>(dx.raw()));
        else
          input_gradient<float, kN, kS>(p.g, static_cast<const float*>(d.get_data_handle()),
                                        winners_.data(), dx.f32());
      });
    });
  }

  void release_saved() override {
    trained_ = false;  // the winners are gone
    winners_ = std::vector<uint8_t>();
    composed_->release_saved();
  }

 private:
  // The plan for x's layout, or null where the loops do not walk it (the composed ops run).
  const PooledPlan* plan_for(const Tensor& x) {
    RT_CHECK(x.rank() == 4 && x.dim(2) >= window_ && x.dim(3) >= window_, "max pool + ReLU: input ",
             shape_str(x.shape()), " is not 4-D or is smaller than the ", window_, "x", window_,
             " window");
    return plans_.plan(desc_of(x), window_, ctx_.pack_lanes, fuse_);
  }

  const Context& ctx_;
  int window_;
  std::unique_ptr<PoolOp> composed_;  // for layouts the loops do not walk
  bool fuse_;                         // false: composed_ everywhere
  PooledPlans plans_;
  const PooledPlan* last_ = nullptr;  // the last training forward's; null: it ran the composed ops
  bool trained_ = false;              // a training forward's winners (or composed state) are kept
  bool counted_ = false;              // in ctx_.pool_relu_count
  std::vector<uint8_t> winners_;
  CachedReorder dy_reorder_;
};

}  // namespace

std::unique_ptr<PoolOp> make_max_pool_relu(const Context& ctx, int window,
                                           std::unique_ptr<PoolOp> composed, bool fuse) {
  RT_CHECK(window >= 1 && window <= 15, "max pool + ReLU: window ", window, " is not in 1..15");
  return std::make_unique<FusedMaxPoolRelu>(ctx, window, std::move(composed), fuse);
}

}  // namespace ringtrain::backend::cpu
