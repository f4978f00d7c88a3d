// ref_ops.cpp — the reference ops: direct loops over plain NCHW fp32, sums in double.
//
// Written for obviousness, not speed: tests hold every oneDNN op against these.
#include "ref_ops.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "../factories.hpp"

namespace ringtrain::backend::ref {
namespace {

void realloc_plain(Tensor& t, const Shape& shape) {
  if (!t.empty() && t.shape() == shape && t.is_plain()) return;
  RT_CHECK(!t.is_view(), "ref backend: a view cannot change shape to ", shape_str(shape));
  size_t bytes = size_t(shape_numel(shape)) * sizeof(float);
  t = Tensor(shape, DType::kF32, aligned_host_alloc(bytes), bytes);
}

void expect_plain(const Tensor& t, const char* what) {
  RT_CHECK(!t.empty() && t.is_plain() && t.dtype() == DType::kF32, "ref backend: ", what,
           " must be a plain fp32 tensor");
}

// Index of (n, c, h, w) in plain NCHW of dims C, H, W.
inline int64_t at(int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H, int64_t W) {
  return ((n * C + c) * H + h) * W + w;
}

// The kernel taps k (ascending) that reach input row i from output row o = (i + P - k) / S, as
// (k, o) pairs: the terms of a backward-data sum, found once a row rather than tested per term.
std::vector<std::pair<int64_t, int64_t>> taps_reaching(int64_t i, int64_t K, int64_t S, int64_t P,
                                                       int64_t O) {
  std::vector<std::pair<int64_t, int64_t>> taps;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t t = i + P - k;
    if (t >= 0 && t % S == 0 && t / S < O) taps.emplace_back(k, t / S);
  }
  return taps;
}

// The kernel taps [first, last) that land inside an input of extent H from output row o.
struct TapRange {
  int64_t first, last;
};
TapRange taps_inside(int64_t o, int64_t K, int64_t S, int64_t P, int64_t H) {
  const int64_t origin = o * S - P;
  return {std::max<int64_t>(0, -origin), std::min<int64_t>(K, H - origin)};
}

class Conv : public ConvOp {
 public:
  explicit Conv(const ConvSpec& s) : s_(s) {}

  // Each sum runs over the same terms in the same order as the plain loop with a bounds test
  // per term; the loops only skip the terms that test would drop.
  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    expect_plain(x, "conv x");
    set_dims(x);
    realloc_plain(y, {N_, OC_, OH_, OW_});
    const float *xs = x.f32(), *ws = w.f32();
    float* ys = y.f32();
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t oc = 0; oc < OC_; ++oc)
        for (int64_t oh = 0; oh < OH_; ++oh)
          for (int64_t ow = 0; ow < OW_; ++ow) {
            const TapRange rows = taps_inside(oh, K_, S_, P_, H_);
            const TapRange cols = taps_inside(ow, K_, S_, P_, W_);
            double sum = s_.bias ? bias->f32()[oc] : 0.0;
            for (int64_t ic = 0; ic < IC_; ++ic)
              for (int64_t kh = rows.first; kh < rows.last; ++kh)
                for (int64_t kw = cols.first; kw < cols.last; ++kw)
                  sum += double(xs[at(n, ic, oh * S_ - P_ + kh, ow * S_ - P_ + kw, IC_, H_, W_)]) *
                         ws[at(oc, ic, kh, kw, IC_, K_, K_)];
            if (s_.fuse_relu && sum < 0) sum = 0;
            ys[at(n, oc, oh, ow, OC_, OH_, OW_)] = float(sum);
          }
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    realloc_plain(dx, {N_, IC_, H_, W_});
    const float *dys = dy.f32(), *ws = w.f32();
    float* dxs = dx.f32();
    std::vector<std::vector<std::pair<int64_t, int64_t>>> row_taps(H_), col_taps(W_);
    for (int64_t ih = 0; ih < H_; ++ih) row_taps[ih] = taps_reaching(ih, K_, S_, P_, OH_);
    for (int64_t iw = 0; iw < W_; ++iw) col_taps[iw] = taps_reaching(iw, K_, S_, P_, OW_);
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t ic = 0; ic < IC_; ++ic)
        for (int64_t ih = 0; ih < H_; ++ih)
          for (int64_t iw = 0; iw < W_; ++iw) {
            double sum = 0;
            for (int64_t oc = 0; oc < OC_; ++oc)
              for (const auto& [kh, oh] : row_taps[ih])
                for (const auto& [kw, ow] : col_taps[iw])
                  sum += double(dys[at(n, oc, oh, ow, OC_, OH_, OW_)]) *
                         ws[at(oc, ic, kh, kw, IC_, K_, K_)];
            dxs[at(n, ic, ih, iw, IC_, H_, W_)] = float(sum);
          }
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    const float *xs = x.f32(), *dys = dy.f32();
    float* dws = dw.f32();
#pragma omp parallel for collapse(2)
    for (int64_t oc = 0; oc < OC_; ++oc)
      for (int64_t ic = 0; ic < IC_; ++ic)
        for (int64_t kh = 0; kh < K_; ++kh)
          for (int64_t kw = 0; kw < K_; ++kw) {
            double sum = 0;
            for (int64_t n = 0; n < N_; ++n)
              for (int64_t oh = 0; oh < OH_; ++oh) {
                const int64_t ih = oh * S_ - P_ + kh;
                if (ih < 0 || ih >= H_) continue;
                for (int64_t ow = 0; ow < OW_; ++ow) {
                  const int64_t iw = ow * S_ - P_ + kw;
                  if (iw < 0 || iw >= W_) continue;
                  sum += double(dys[at(n, oc, oh, ow, OC_, OH_, OW_)]) *
                         xs[at(n, ic, ih, iw, IC_, H_, W_)];
                }
              }
            dws[at(oc, ic, kh, kw, IC_, K_, K_)] = float(sum);
          }
    if (!s_.bias) return;
    for (int64_t oc = 0; oc < OC_; ++oc) {
      double sum = 0;
      for (int64_t n = 0; n < N_; ++n)
        for (int64_t i = 0; i < OH_ * OW_; ++i) sum += dys[(n * OC_ + oc) * OH_ * OW_ + i];
      dbias->f32()[oc] = float(sum);
    }
  }

 private:
  void set_dims(const Tensor& x) {
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.in_channels, "conv: input ", shape_str(x.shape()),
             " does not have ", s_.in_channels, " channels");
    N_ = x.dim(0), IC_ = x.dim(1), H_ = x.dim(2), W_ = x.dim(3);
    OC_ = s_.out_channels, K_ = s_.kernel, S_ = s_.stride, P_ = s_.padding;
    OH_ = (H_ + 2 * P_ - K_) / S_ + 1, OW_ = (W_ + 2 * P_ - K_) / S_ + 1;
  }
  ConvSpec s_;
  int64_t N_ = 0, IC_ = 0, H_ = 0, W_ = 0, OC_ = 0, K_ = 0, S_ = 1, P_ = 0, OH_ = 0, OW_ = 0;
};

class Linear : public LinearOp {
 public:
  explicit Linear(const LinearSpec& s) : s_(s) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    expect_plain(x, "linear x");
    x_shape_ = x.shape();
    N_ = x.dim(0);
    RT_CHECK(x.numel() / N_ == s_.in_features, "linear: input ", shape_str(x.shape()),
             " does not have ", s_.in_features, " features");
    realloc_plain(y, {N_, s_.out_features});
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t o = 0; o < s_.out_features; ++o) {
        double sum = s_.bias ? bias->f32()[o] : 0.0;
        for (int64_t f = 0; f < s_.in_features; ++f)
          sum += double(x.f32()[n * s_.in_features + f]) * w.f32()[o * s_.in_features + f];
        y.f32()[n * s_.out_features + o] = float(sum);
      }
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    realloc_plain(dx, x_shape_);
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t f = 0; f < s_.in_features; ++f) {
        double sum = 0;
        for (int64_t o = 0; o < s_.out_features; ++o)
          sum += double(dy.f32()[n * s_.out_features + o]) * w.f32()[o * s_.in_features + f];
        dx.f32()[n * s_.in_features + f] = float(sum);
      }
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
#pragma omp parallel for collapse(2)
    for (int64_t o = 0; o < s_.out_features; ++o)
      for (int64_t f = 0; f < s_.in_features; ++f) {
        double sum = 0;
        for (int64_t n = 0; n < N_; ++n)
          sum += double(dy.f32()[n * s_.out_features + o]) * x.f32()[n * s_.in_features + f];
        dw.f32()[o * s_.in_features + f] = float(sum);
      }
    if (!s_.bias) return;
    for (int64_t o = 0; o < s_.out_features; ++o) {
      double sum = 0;
      for (int64_t n = 0; n < N_; ++n) sum += dy.f32()[n * s_.out_features + o];
      dbias->f32()[o] = float(sum);
    }
  }

 private:
  LinearSpec s_;
  Shape x_shape_;
  int64_t N_ = 0;
};

class BatchNorm : public BatchNormOp {
 public:
  explicit BatchNorm(const BatchNormSpec& s) : s_(s) {}

  double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    expect_plain(x, "batch norm x");
    set_dims(x);
    realloc_plain(mean, {C_});
    realloc_plain(var, {C_});
    std::vector<float> sums(C_ + 1);
    for (int64_t c = 0; c < C_; ++c) sums[c] = float(channel_sum(x, c, 0.0, false));
    sums[C_] = float(N_ * HW_);
    if (reducer && *reducer) (*reducer)(sums.data(), sums.size());
    count_ = sums[C_];
    for (int64_t c = 0; c < C_; ++c) mean.f32()[c] = float(sums[c] / count_);
    for (int64_t c = 0; c < C_; ++c) sums[c] = float(channel_sum(x, c, mean.f32()[c], true));
    if (reducer && *reducer) (*reducer)(sums.data(), C_);
    for (int64_t c = 0; c < C_; ++c) var.f32()[c] = float(sums[c] / count_);
    normalise(x, gamma, beta, mean, var, y);
    return count_;
  }

  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    expect_plain(x, "batch norm x");
    set_dims(x);
    normalise(x, gamma, beta, mean, var, y);
  }

  void backward(const Tensor& x, const Tensor& dy_out, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    realloc_plain(dx, x.shape());
    // Through the fused ReLU first: the gradient passes where the output was positive.
    std::vector<float> dy_bn(dy_out.f32(), dy_out.f32() + dy_out.numel());
    if (s_.fuse_relu)
      for (size_t i = 0; i < dy_bn.size(); ++i) dy_bn[i] = relu_open_[i] ? dy_bn[i] : 0.0f;
    const float* dy = dy_bn.data();
    std::vector<float> sums(2 * C_);
    for (int64_t c = 0; c < C_; ++c) {
      double inv_std = 1.0 / std::sqrt(double(var.f32()[c]) + s_.eps), sg = 0, sb = 0;
      for_channel(c, [&](int64_t i) {
        sg += double(dy[i]) * (x.f32()[i] - mean.f32()[c]) * inv_std;
        sb += dy[i];
      });
      dgamma.f32()[c] = sums[c] = float(sg);
      dbeta.f32()[c] = sums[C_ + c] = float(sb);
    }
    if (reducer && *reducer) (*reducer)(sums.data(), sums.size());
    for (int64_t c = 0; c < C_; ++c) {
      double inv_std = 1.0 / std::sqrt(double(var.f32()[c]) + s_.eps);
      double k = gamma.f32()[c] * inv_std;
      for_channel(c, [&](int64_t i) {
        double xhat = (x.f32()[i] - mean.f32()[c]) * inv_std;
        dx.f32()[i] = float(k * (dy[i] - (sums[C_ + c] + xhat * sums[c]) / count_));
      });
    }
  }

 private:
  void set_dims(const Tensor& x) {
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.channels, "batch norm: input ", shape_str(x.shape()),
             " does not have ", s_.channels, " channels");
    N_ = x.dim(0), C_ = x.dim(1), HW_ = x.dim(2) * x.dim(3);
  }
  template <typename F>
  void for_channel(int64_t c, F&& f) const {
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t i = 0; i < HW_; ++i) f((n * C_ + c) * HW_ + i);
  }
  double channel_sum(const Tensor& x, int64_t c, double center, bool squares) const {
    double sum = 0;
    for_channel(c, [&](int64_t i) {
      double d = x.f32()[i] - center;
      sum += squares ? d * d : d;
    });
    return sum;
  }
  void normalise(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                 const Tensor& var, Tensor& y) {
    realloc_plain(y, x.shape());
    for (int64_t c = 0; c < C_; ++c) {
      double inv_std = 1.0 / std::sqrt(double(var.f32()[c]) + s_.eps);
      for_channel(c, [&](int64_t i) {
        y.f32()[i] = float(gamma.f32()[c] * (x.f32()[i] - mean.f32()[c]) * inv_std + beta.f32()[c]);
      });
    }
    if (!s_.fuse_relu) return;
    relu_open_.assign(size_t(y.numel()), false);
    for (int64_t i = 0; i < y.numel(); ++i) {
      relu_open_[i] = y.f32()[i] > 0;
      if (!relu_open_[i]) y.f32()[i] = 0.0f;
    }
  }
  BatchNormSpec s_;
  int64_t N_ = 0, C_ = 0, HW_ = 0;
  double count_ = 0;
  std::vector<bool> relu_open_;  // fused ReLU: where the last forward's output was > 0
};

class Relu : public ReluOp {
 public:
  void forward(const Tensor& x, Tensor& y) override {
    expect_plain(x, "relu x");
    realloc_plain(y, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.f32()[i] = x.f32()[i] > 0 ? x.f32()[i] : 0.0f;
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    realloc_plain(dx, y.shape());
    for (int64_t i = 0; i < y.numel(); ++i) dx.f32()[i] = y.f32()[i] > 0 ? dy.f32()[i] : 0.0f;
  }
  void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                       Tensor& dx) override {
    RT_CHECK(dy_a.shape() == y.shape() && dy_b.shape() == y.shape(), "relu backward: dy parts ",
             shape_str(dy_a.shape()), " and ", shape_str(dy_b.shape()), " differ from y ",
             shape_str(y.shape()));
    realloc_plain(dx, y.shape());
    for (int64_t i = 0; i < y.numel(); ++i)
      dx.f32()[i] = y.f32()[i] > 0 ? dy_a.f32()[i] + dy_b.f32()[i] : 0.0f;
  }
};

class Pool : public PoolOp {
 public:
  explicit Pool(const PoolSpec& s) : s_(s) {}

  void forward(const Tensor& x, Tensor& y, bool training) override {
    expect_plain(x, "pool x");
    x_shape_ = x.shape();
    N_ = x.dim(0), C_ = x.dim(1), H_ = x.dim(2), W_ = x.dim(3);
    KH_ = s_.global ? H_ : s_.kernel, KW_ = s_.global ? W_ : s_.kernel;
    S_ = s_.global ? 1 : s_.stride, P_ = s_.global ? 0 : s_.padding;
    OH_ = (H_ + 2 * P_ - KH_) / S_ + 1, OW_ = (W_ + 2 * P_ - KW_) / S_ + 1;
    realloc_plain(y, {N_, C_, OH_, OW_});
    argmax_.assign(size_t(y.numel()), -1);
    for (int64_t nc = 0; nc < N_ * C_; ++nc)
      for (int64_t oh = 0; oh < OH_; ++oh)
        for (int64_t ow = 0; ow < OW_; ++ow) {
          double sum = 0, best = -INFINITY;
          int64_t best_i = -1, out = (nc * OH_ + oh) * OW_ + ow;
          window(oh, ow, [&](int64_t ih, int64_t iw) {
            int64_t i = (nc * H_ + ih) * W_ + iw;
            sum += x.f32()[i];
            if (x.f32()[i] > best) best = x.f32()[i], best_i = i;
          });
          y.f32()[out] = float(s_.kind == PoolKind::kMax ? best : sum / double(KH_ * KW_));
          argmax_[out] = best_i;
        }
    (void)training;
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    realloc_plain(dx, x_shape_);
    std::vector<double> acc(size_t(dx.numel()), 0.0);
    for (int64_t nc = 0; nc < N_ * C_; ++nc)
      for (int64_t oh = 0; oh < OH_; ++oh)
        for (int64_t ow = 0; ow < OW_; ++ow) {
          int64_t out = (nc * OH_ + oh) * OW_ + ow;
          if (s_.kind == PoolKind::kMax) {
            acc[argmax_[out]] += dy.f32()[out];
            continue;
          }
          window(oh, ow, [&](int64_t ih, int64_t iw) {
            acc[(nc * H_ + ih) * W_ + iw] += dy.f32()[out] / double(KH_ * KW_);
          });
        }
    for (size_t i = 0; i < acc.size(); ++i) dx.f32()[i] = float(acc[i]);
  }

 private:
  // Calls f(ih, iw) for the in-bounds positions of output (oh, ow)'s window.
  template <typename F>
  void window(int64_t oh, int64_t ow, F&& f) const {
    for (int64_t kh = 0; kh < KH_; ++kh)
      for (int64_t kw = 0; kw < KW_; ++kw) {
        int64_t ih = oh * S_ - P_ + kh, iw = ow * S_ - P_ + kw;
        if (ih >= 0 && ih < H_ && iw >= 0 && iw < W_) f(ih, iw);
      }
  }
  PoolSpec s_;
  Shape x_shape_;
  std::vector<int64_t> argmax_;
  int64_t N_ = 0, C_ = 0, H_ = 0, W_ = 0, KH_ = 0, KW_ = 0, S_ = 1, P_ = 0, OH_ = 0, OW_ = 0;
};

class Add : public AddOp {
 public:
  explicit Add(bool relu) : relu_(relu) {}
  void forward(const Tensor& a, const Tensor& b, Tensor& out) override {
    RT_CHECK(a.shape() == b.shape(), "add: shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " differ");
    realloc_plain(out, a.shape());
    for (int64_t i = 0; i < a.numel(); ++i) {
      float v = a.f32()[i] + b.f32()[i];
      out.f32()[i] = relu_ && v < 0 ? 0.0f : v;
    }
  }

 private:
  bool relu_;
};

}  // namespace

std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) {
  RT_CHECK(!s.accumulate, "ref conv: ConvSpec::accumulate is not fused here (fuses_conv_residual)");
  return std::make_unique<Conv>(s);
}
std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) {
  return std::make_unique<Linear>(s);
}
std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) {
  return std::make_unique<BatchNorm>(s);
}
std::unique_ptr<ReluOp> make_relu() {
  return std::make_unique<Relu>();
}
std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) {
  return std::make_unique<Pool>(s);
}
std::unique_ptr<AddOp> make_add(bool relu) {
  return std::make_unique<Add>(relu);
}

}  // namespace ringtrain::backend::ref
