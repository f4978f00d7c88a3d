// norm_pool.cpp — batch norm (our own passes where they walk the layout, else oneDNN's with a
// synchronized-BN path; our own pass for batch norm + residual + ReLU), ReLU, pooling and add.
#include <omp.h>

#include <cmath>
#include <vector>

#include "../host_math.hpp"
#include "batch_statistics.hpp"
#include "lane_pack.hpp"
#include "norm_passes.hpp"
#include "ops.hpp"
#include "ringtrain/core/bf16.hpp"

namespace ringtrain::backend::cpu {
namespace {

using bn_fwd = dnnl::batch_normalization_forward;
using bn_bwd = dnnl::batch_normalization_backward;
using nflags = dnnl::normalization_flags;
using relu_fwd = dnnl::eltwise_forward;
using relu_bwd = dnnl::eltwise_backward;
using pool_fwd = dnnl::pooling_forward;
using pool_bwd = dnnl::pooling_backward;

// Element i of fp32 or bf16 activations as a float, and written back (bf16: rounded to
// nearest even), so the synchronized-BN walks below serve both precisions.
inline float element(const float* p, int64_t i) {
  return p[i];
}
inline float element(const uint16_t* p, int64_t i) {
  return bf16_to_float(p[i]);
}
inline void set_element(float* p, int64_t i, float v) {
  p[i] = v;
}
inline void set_element(uint16_t* p, int64_t i, float v) {
  p[i] = float_to_bf16(v);
}

// Every element of a channel of a 4-D tensor in a oneDNN layout with at most one inner block on
// channels (nchw, nhwc, nChw8c, nChw16c), through its channel runs.
struct ChannelWalk {
  explicit ChannelWalk(const memory::desc& md) {
    const auto& d = md.data;
    RT_CHECK(d.ndims == 4 && d.format_kind == dnnl_blocked, "sync BN: unsupported layout");
    RT_CHECK(channel_runs(md, runs), "sync BN: unsupported blocked layout");
    n = d.dims[0], h = d.dims[2], w = d.dims[3];
  }
  // Calls f(offset) for every element of channel c.
  template <typename F>
  void channel(int64_t c, F&& f) const {
    const int64_t run = c / runs.lanes, lane = c % runs.lanes;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) f(runs.at(i, run, y, x) + lane);
  }
  int64_t count() const { return n * h * w; }
  ChannelRuns runs;
  int64_t n, h, w;
};

class BatchNorm : public BatchNormOp {
 public:
  BatchNorm(const Context& ctx, const BatchNormSpec& spec, BatchNormPaths paths)
      : ctx_(ctx), s_(spec), paths_(paths) {}

  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    Plan& p = plan_for(x);
    const bool own = paths_.own_passes && p.walkable;
    if (!norm_counted_) {
      ++(own ? ctx_.norm_count.fused : ctx_.norm_count.composed);
      norm_counted_ = true;
    }
    backward_by_own_passes_ = own;
    if (own) {
      count_ = statistics_.compute(p.planes, s_.channels, x, mean, var, reducer);
      ensure(y, x.shape(), p.x_md);
      normalise(p.planes, x, nullptr, coefficients(p, gamma, beta, mean, var), s_.fuse_relu, y);
      return count_;
    }
    ensure_vector(mean, s_.channels);
    ensure_vector(var, s_.channels);
    ensure(y, x.shape(), p.x_md);
    if (reducer && *reducer) {
      global_statistics(p, x, mean, var, *reducer);
      run_forward(p, p.global_fwd, x, gamma, beta, mean, var, y);
      return count_;
    }
    run_forward(p, p.train_fwd, x, gamma, beta, mean, var, y);
    return count_ = double(x.dim(0) * x.dim(2) * x.dim(3));
  }

  double forward_training_add_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& residual, Tensor& y, Tensor& mean, Tensor& var,
                                   const StatReducer* reducer) override {
    if (s_.fuse_relu) return 0;
    Plan& p = plan_for(x);
    const bool fused = paths_.fuse_residual && p.walkable;
    if (!counted_) {
      ++(fused ? ctx_.norm_add_count.fused : ctx_.norm_add_count.composed);
      counted_ = true;
    }
    if (!fused) return 0;
    RT_CHECK(residual.shape() == x.shape(), "batch norm + residual: residual ",
             shape_str(residual.shape()), " differs from x ", shape_str(x.shape()));
    const memory r = as_layout(ctx_, residual, p.x_md, ctx_.call_scratch.second, residual_reorder_);
    count_ = statistics_.compute(p.planes, s_.channels, x, mean, var, reducer);
    backward_by_own_passes_ = paths_.own_passes;  // else oneDNN's, synchronized by count_
    ensure(y, x.shape(), p.x_md);
    normalise(p.planes, x, r.get_data_handle(), coefficients(p, gamma, beta, mean, var), true, y);
    return count_;
  }

  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    Plan& p = plan_for(x);
    ensure(y, x.shape(), p.x_md);
    run_forward(p, p.global_fwd, x, gamma, beta, mean, var, y);
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    Plan& p = plan_for(x);
    if (backward_by_own_passes_ && p.walkable) {
      const memory d = as_layout(ctx_, dy, p.x_md, ctx_.call_scratch.dy, dy_reorder_);
      ensure(dx, x.shape(), p.x_md);
      const NormCoefficients relu{a_.data(), b_.data()};
      own_backward_.run(p.planes, x, d.get_data_handle(), gamma, mean, var, s_.eps, count_,
                        s_.fuse_relu ? &relu : nullptr, dx, dgamma, dbeta, reducer);
      return;
    }
    bool sync = reducer && *reducer;
    bn_bwd& prim = sync ? p.global_bwd : p.train_bwd;
    memory ddst = as_layout(ctx_, dy, p.x_md, ctx_.call_scratch.dy, dy_reorder_);
    ensure(dx, x.shape(), p.x_md);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem_of(ctx_, x)},
                                         {DNNL_ARG_DIFF_DST, ddst},
                                         {DNNL_ARG_MEAN, mem_of(ctx_, mean)},
                                         {DNNL_ARG_VARIANCE, mem_of(ctx_, var)},
                                         {DNNL_ARG_SCALE, mem_of(ctx_, gamma)},
                                         // oneDNN 2.6 insists on a shift argument here though the
                                         // backward pass never reads it.
                                         {DNNL_ARG_SHIFT, mem_of(ctx_, gamma)},
                                         {DNNL_ARG_DIFF_SRC, mem_of(ctx_, dx)},
                                         {DNNL_ARG_DIFF_SCALE, mem_of(ctx_, dgamma)},
                                         {DNNL_ARG_DIFF_SHIFT, mem_of(ctx_, dbeta)}};
    if (s_.fuse_relu) args[DNNL_ARG_WORKSPACE] = p.workspace;
    prim.execute(ctx_.stream, args);
    if (sync) complete_sync_backward(p, x, gamma, mean, var, dx, dgamma, dbeta, *reducer);
  }

 private:
  struct Plan {
    memory::desc x_md;
    bn_fwd train_fwd, global_fwd;
    bn_bwd train_bwd, global_bwd;
    memory workspace;
    Planes planes;          // x for our own loops (forward_training_add_relu)
    bool walkable = false;  // whether they walk x's layout
  };

  Plan& plan_for(const Tensor& x) {
    memory::desc x_md = desc_of(x);
    for (auto& p : plans_)
      if (p->x_md == x_md) return *p;
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.channels, "batch norm: input ", shape_str(x.shape()),
             " does not have ", s_.channels, " channels");
    auto p = std::make_unique<Plan>();
    p->x_md = x_md;
    p->planes.n = x.dim(0), p->planes.h = x.dim(2), p->planes.w = x.dim(3);
    p->planes.pack = ctx_.pack_lanes;
    p->walkable = channel_runs(x_md, p->planes.x) && p->planes.walkable();
    auto scale_shift = nflags::use_scale | nflags::use_shift;
    if (s_.fuse_relu) scale_shift |= nflags::fuse_norm_relu;
    auto global = scale_shift | nflags::use_global_stats;
    dnnl_try("batch norm", [&] {
      bn_fwd::primitive_desc train(
          bn_fwd::desc(dnnl::prop_kind::forward_training, x_md, s_.eps, scale_shift), ctx_.engine);
      bn_fwd::primitive_desc glob(
          bn_fwd::desc(dnnl::prop_kind::forward_training, x_md, s_.eps, global), ctx_.engine);
      p->train_fwd = bn_fwd(train);
      p->global_fwd = bn_fwd(glob);
      p->train_bwd = bn_bwd(bn_bwd::primitive_desc(
          bn_bwd::desc(dnnl::prop_kind::backward, x_md, x_md, s_.eps, scale_shift), ctx_.engine,
          train));
      p->global_bwd = bn_bwd(bn_bwd::primitive_desc(
          bn_bwd::desc(dnnl::prop_kind::backward, x_md, x_md, s_.eps, global), ctx_.engine, glob));
      // With a fused ReLU, forward records where it let values through for backward.
      if (s_.fuse_relu) p->workspace = memory(train.workspace_desc(), ctx_.engine);
      return 0;
    });
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  // a = gamma / sqrt(var + eps) and b = beta - mean a per lane, into a_ and b_ (kept for the
  // backward's ReLU mask).
  NormCoefficients coefficients(const Plan& p, const Tensor& gamma, const Tensor& beta,
                                const Tensor& mean, const Tensor& var) {
    const float* a = per_lane(p.planes.x, s_.channels, a_, [&](int64_t c) {
      return gamma.f32()[c] / std::sqrt(var.f32()[c] + s_.eps);
    });
    const float* b = per_lane(p.planes.x, s_.channels, b_,
                              [&](int64_t c) { return beta.f32()[c] - mean.f32()[c] * a[c]; });
    return {a, b};
  }

  void run_forward(Plan& p, bn_fwd& prim, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                   const Tensor& mean, const Tensor& var, Tensor& y) {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, mem_of(ctx_, x)},       {DNNL_ARG_DST, mem_of(ctx_, y)},
        {DNNL_ARG_SCALE, mem_of(ctx_, gamma)}, {DNNL_ARG_SHIFT, mem_of(ctx_, beta)},
        {DNNL_ARG_MEAN, mem_of(ctx_, mean)},   {DNNL_ARG_VARIANCE, mem_of(ctx_, var)}};
    if (s_.fuse_relu) args[DNNL_ARG_WORKSPACE] = p.workspace;
    prim.execute(ctx_.stream, args);
  }

  // Mean, then variance about it (two passes, so no cancellation), over every rank.
  void global_statistics(const Plan& p, const Tensor& x, Tensor& mean, Tensor& var,
                         const StatReducer& reducer) {
    if (x.dtype() == DType::kBF16)
      global_statistics_of(p, static_cast<const uint16_t*>(x.raw()), mean, var, reducer);
    else
      global_statistics_of(p, x.f32(), mean, var, reducer);
  }

  template <typename T>
  void global_statistics_of(const Plan& p, const T* data, Tensor& mean, Tensor& var,
                            const StatReducer& reducer) {
    ChannelWalk walk(p.x_md);
    const int64_t C = s_.channels;
    sums_.assign(C + 1, 0.0f);
#pragma omp parallel for
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      walk.channel(c, [&](int64_t off) { s += element(data, off); });
      sums_[c] = float(s);
    }
    sums_[C] = float(walk.count());
    reducer(sums_.data(), sums_.size());
    count_ = sums_[C];
    float* m = mean.f32();
    for (int64_t c = 0; c < C; ++c) m[c] = float(sums_[c] / count_);
#pragma omp parallel for
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      walk.channel(c, [&](int64_t off) {
        double d = element(data, off) - m[c];
        s += d * d;
      });
      sums_[c] = float(s);
    }
    reducer(sums_.data(), C);
    float* v = var.f32();
    for (int64_t c = 0; c < C; ++c) v[c] = float(sums_[c] / count_);
  }

  // dx so far is gamma*inv_std*dy (statistics held constant); add the terms through the
  // statistics, with dgamma and dbeta summed over every rank:
  //   dx -= gamma*inv_std/M * (sum_dbeta + xhat * sum_dgamma)
  void complete_sync_backward(const Plan& p, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& var, Tensor& dx,
                              const Tensor& dgamma, const Tensor& dbeta,
                              const StatReducer& reducer) {
    const int64_t C = s_.channels;
    sums_.resize(2 * C);
    std::copy(dgamma.f32(), dgamma.f32() + C, sums_.begin());
    std::copy(dbeta.f32(), dbeta.f32() + C, sums_.begin() + C);
    reducer(sums_.data(), 2 * C);
    if (x.dtype() == DType::kBF16)
      subtract_statistics_terms(p, static_cast<const uint16_t*>(x.raw()),
                                static_cast<uint16_t*>(dx.raw()), gamma, mean, var);
    else
      subtract_statistics_terms(p, x.f32(), dx.f32(), gamma, mean, var);
  }

  template <typename T>
  void subtract_statistics_terms(const Plan& p, const T* xs, T* out, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& var) {
    const int64_t C = s_.channels;
    ChannelWalk walk(p.x_md);
#pragma omp parallel for
    for (int64_t c = 0; c < C; ++c) {
      float inv_std = 1.0f / std::sqrt(var.f32()[c] + s_.eps);
      float k = float(gamma.f32()[c] * inv_std / count_);
      float mu = mean.f32()[c], sg = sums_[c], sb = sums_[C + c];
      walk.channel(c, [&](int64_t off) {
        set_element(out, off,
                    element(out, off) - k * (sb + (element(xs, off) - mu) * inv_std * sg));
      });
    }
  }

  const Context& ctx_;
  BatchNormSpec s_;
  BatchNormPaths paths_;
  bool counted_ = false;       // in ctx_.norm_add_count, at the first forward_training_add_relu
  bool norm_counted_ = false;  // in ctx_.norm_count, at the first forward_training
  // The last training forward's values per channel (every rank's where synchronized), and
  // whether its backward runs our passes (else oneDNN's primitive).
  double count_ = 0;
  bool backward_by_own_passes_ = false;
  NormBackward own_backward_;
  std::vector<std::unique_ptr<Plan>> plans_;
  std::vector<float> sums_;
  CachedReorder dy_reorder_;
  BatchStatistics statistics_;
  std::vector<float> a_, b_;  // per_lane's arrays
  CachedReorder residual_reorder_;
};

// host::relu_backward_of_sum's numbers, dx = (a + b) * (y > 0 ? 1 : 0), N lanes at a time with
// dx streamed past the caches (streams_output). dx starts on a 64-byte boundary.
template <int N>
void relu_backward_of_sum_streamed(const float* y, const float* a, const float* b, float* dx,
                                   int64_t n) {
  using P = LanePack<N>;
  using F = typename P::F;
  const int64_t packs = n / N;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < packs; ++i) {
      const int64_t at = i * N;
      const F keep = P::load(y + at) > 0.0f ? F{} + 1.0f : F{};
      P::stream(dx + at, (P::load(a + at) + P::load(b + at)) * keep);
    }
    P::stream_fence();  // before the barrier that ends the region
  }
  const int64_t done = packs * N;
  if (done < n) host::relu_backward_of_sum(y + done, a + done, b + done, dx + done, n - done);
}

class Relu : public ReluOp {
 public:
  explicit Relu(const Context& ctx) : ctx_(ctx) {}

  void forward(const Tensor& x, Tensor& y) override {
    Plan& p = plan_for(x);
    ensure(y, x.shape(), p.md);
    p.fwd.execute(ctx_.stream, {{DNNL_ARG_SRC, mem_of(ctx_, x)}, {DNNL_ARG_DST, mem_of(ctx_, y)}});
  }

  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    Plan& p = plan_for(y);
    memory ddst = as_layout(ctx_, dy, p.md, ctx_.call_scratch.dy, dy_reorder_);
    ensure(dx, y.shape(), p.md);
    p.bwd.execute(ctx_.stream, {{DNNL_ARG_DST, mem_of(ctx_, y)},
                                {DNNL_ARG_DIFF_DST, ddst},
                                {DNNL_ARG_DIFF_SRC, mem_of(ctx_, dx)}});
  }

  // oneDNN 2.6 has no primitive for it (eltwise backward takes no post-ops, binary no mask),
  // so one OpenMP loop over y's layout, the padding included: every operand is zero there.
  void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                       Tensor& dx) override {
    RT_CHECK(dy_a.shape() == y.shape() && dy_b.shape() == y.shape(), "relu backward: dy parts ",
             shape_str(dy_a.shape()), " and ", shape_str(dy_b.shape()), " differ from y ",
             shape_str(y.shape()));
    const memory::desc md = desc_of(y);
    const memory a = as_layout(ctx_, dy_a, md, ctx_.call_scratch.dy, dy_reorder_);
    const memory b = as_layout(ctx_, dy_b, md, ctx_.call_scratch.second, dy_b_reorder_);
    ensure(dx, y.shape(), md);
    const auto type = md.data_type();
    RT_CHECK(type == dt::f32 || type == dt::bf16,
             "relu backward: y's type is neither fp32 nor bf16");
    const int64_t n = int64_t(md.get_size() / memory::data_type_size(type));
    if (type == dt::f32 && streams_output(dx.raw(), int64_t(md.get_size()))) {
      const auto run = ctx_.pack_lanes >= kWidestPack ? relu_backward_of_sum_streamed<kWidestPack>
                                                      : relu_backward_of_sum_streamed<8>;
      run(static_cast<const float*>(y.raw()), static_cast<const float*>(a.get_data_handle()),
          static_cast<const float*>(b.get_data_handle()), dx.f32(), n);
    } else if (type == dt::f32) {
      host::relu_backward_of_sum(static_cast<const float*>(y.raw()),
                                 static_cast<const float*>(a.get_data_handle()),
                                 static_cast<const float*>(b.get_data_handle()), dx.f32(), n);
    } else {
      host::relu_backward_of_sum(
          static_cast<const uint16_t*>(y.raw()), static_cast<const uint16_t*>(a.get_data_handle()),
          static_cast<const uint16_t*>(b.get_data_handle()), static_cast<uint16_t*>(dx.raw()), n);
    }
  }

 private:
  struct Plan {
    memory::desc md;
    relu_fwd fwd;
    relu_bwd bwd;
  };

  Plan& plan_for(const Tensor& t) {
    memory::desc md = desc_of(t);
    for (auto& p : plans_)
      if (p->md == md) return *p;
    auto p = std::make_unique<Plan>();
    p->md = md;
    const auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    dnnl_try("relu", [&] {
      relu_fwd::primitive_desc fwd(
          relu_fwd::desc(dnnl::prop_kind::forward_training, alg, md, 0.0f, 0.0f), ctx_.engine);
      p->fwd = relu_fwd(fwd);
      p->bwd = relu_bwd(
          relu_bwd::primitive_desc(relu_bwd::desc(alg, md, md, 0.0f, 0.0f), ctx_.engine, fwd));
      return 0;
    });
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  const Context& ctx_;
  std::vector<std::unique_ptr<Plan>> plans_;
  CachedReorder dy_reorder_, dy_b_reorder_;
};

class Pool : public PoolOp {
 public:
  Pool(const Context& ctx, const PoolSpec& spec) : ctx_(ctx), s_(spec) {}

  void forward(const Tensor& x, Tensor& y, bool training) override {
    Plan& p = plan_for(x);
    ensure(y, p.y_shape, p.train_pd.dst_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem_of(ctx_, x)},
                                         {DNNL_ARG_DST, mem_of(ctx_, y)}};
    if (training) {
      if (p.has_workspace) args[DNNL_ARG_WORKSPACE] = p.workspace;
      p.train.execute(ctx_.stream, args);
      last_ = &p;
    } else {
      p.infer.execute(ctx_.stream, args);
    }
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    RT_CHECK(last_ != nullptr, "pool backward before a training forward");
    Plan& p = *last_;
    RT_CHECK(dy.shape() == p.y_shape, "pool backward: dy ", shape_str(dy.shape()), ", expected ",
             shape_str(p.y_shape));
    memory ddst = as_layout(ctx_, dy, p.train_pd.dst_desc(), ctx_.call_scratch.dy, dy_reorder_);
    ensure(dx, p.x_shape, p.x_md);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, ddst},
                                         {DNNL_ARG_DIFF_SRC, mem_of(ctx_, dx)}};
    if (p.has_workspace) args[DNNL_ARG_WORKSPACE] = p.workspace;
    p.bwd.execute(ctx_.stream, args);
  }

 private:
  struct Plan {
    memory::desc x_md;
    Shape x_shape, y_shape;
    pool_fwd::primitive_desc train_pd;
    pool_fwd train, infer;
    pool_bwd bwd;
    memory workspace;
    bool has_workspace = false;
  };

  Plan& plan_for(const Tensor& x) {
    memory::desc x_md = desc_of(x);
    for (auto& p : plans_)
      if (p->x_md == x_md) return *p;
    RT_CHECK(x.rank() == 4, "pool: input ", shape_str(x.shape()), " is not 4-D");
    auto p = std::make_unique<Plan>();
    p->x_md = x_md;
    p->x_shape = x.shape();
    int64_t kh = s_.global ? x.dim(2) : s_.kernel, kw = s_.global ? x.dim(3) : s_.kernel;
    int64_t st = s_.global ? 1 : s_.stride, pad = s_.global ? 0 : s_.padding;
    int64_t oh = (x.dim(2) + 2 * pad - kh) / st + 1, ow = (x.dim(3) + 2 * pad - kw) / st + 1;
    RT_CHECK(oh >= 1 && ow >= 1, "pool: input ", shape_str(x.shape()), " smaller than the kernel");
    p->y_shape = {x.dim(0), x.dim(1), oh, ow};
    memory::dims strides{st, st}, kernel{kh, kw}, pl{pad, pad};
    memory::dims pr{std::max<int64_t>(0, (oh - 1) * st + kh - x.dim(2) - pad),
                    std::max<int64_t>(0, (ow - 1) * st + kw - x.dim(3) - pad)};
    auto alg = s_.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                         : dnnl::algorithm::pooling_avg_include_padding;
    memory::desc y_any(to_dims(p->y_shape), x_md.data_type(), tag::any);
    dnnl_try("pooling", [&] {
      p->train_pd = pool_fwd::primitive_desc(pool_fwd::desc(dnnl::prop_kind::forward_training, alg,
                                                            x_md, y_any, strides, kernel, pl, pr),
                                             ctx_.engine);
      p->train = pool_fwd(p->train_pd);
      // Inference writes the same layout as training, so a layer's output never moves.
      p->infer = pool_fwd(
          pool_fwd::primitive_desc(pool_fwd::desc(dnnl::prop_kind::forward_inference, alg, x_md,
                                                  p->train_pd.dst_desc(), strides, kernel, pl, pr),
                                   ctx_.engine));
      p->bwd = pool_bwd(pool_bwd::primitive_desc(
          pool_bwd::desc(alg, x_md, p->train_pd.dst_desc(), strides, kernel, pl, pr), ctx_.engine,
          p->train_pd));
      return 0;
    });
    memory::desc ws = p->train_pd.workspace_desc();
    p->has_workspace = ws.get_size() > 0;
    if (p->has_workspace) p->workspace = memory(ws, ctx_.engine);
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  const Context& ctx_;
  PoolSpec s_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* last_ = nullptr;
  CachedReorder dy_reorder_;
};

class Add : public AddOp {
 public:
  Add(const Context& ctx, bool fuse_relu) : ctx_(ctx), relu_(fuse_relu) {}

  void forward(const Tensor& a, const Tensor& b, Tensor& out) override {
    RT_CHECK(a.shape() == b.shape(), "add: shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " differ");
    memory::desc md = desc_of(a);
    Plan& p = plan_for(md);
    memory src1 = as_layout(ctx_, b, md, ctx_.call_scratch.second, b_reorder_);
    ensure(out, a.shape(), md);
    p.prim.execute(ctx_.stream, {{DNNL_ARG_SRC_0, mem_of(ctx_, a)},
                                 {DNNL_ARG_SRC_1, src1},
                                 {DNNL_ARG_DST, mem_of(ctx_, out)}});
  }

 private:
  struct Plan {
    memory::desc md;
    dnnl::binary prim;
  };

  Plan& plan_for(const memory::desc& md) {
    for (auto& p : plans_)
      if (p->md == md) return *p;
    auto p = std::make_unique<Plan>();
    p->md = md;
    dnnl::primitive_attr attr;
    if (relu_) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    p->prim = dnnl_try("add", [&] {
      return dnnl::binary(dnnl::binary::primitive_desc(
          dnnl::binary::desc(dnnl::algorithm::binary_add, md, md, md), attr, ctx_.engine));
    });
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  const Context& ctx_;
  bool relu_;
  std::vector<std::unique_ptr<Plan>> plans_;
  CachedReorder b_reorder_;
};

}  // namespace

std::unique_ptr<BatchNormOp> make_batch_norm(const Context& ctx, const BatchNormSpec& spec,
                                             BatchNormPaths paths) {
  return std::make_unique<BatchNorm>(ctx, spec, paths);
}
std::unique_ptr<ReluOp> make_relu(const Context& ctx) {
  return std::make_unique<Relu>(ctx);
}
std::unique_ptr<PoolOp> make_pool(const Context& ctx, const PoolSpec& spec) {
  return std::make_unique<Pool>(ctx, spec);
}
std::unique_ptr<AddOp> make_add(const Context& ctx, bool fuse_relu) {
  return std::make_unique<Add>(ctx, fuse_relu);
}

}  // namespace ringtrain::backend::cpu
