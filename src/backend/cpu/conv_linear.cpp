// conv_linear.cpp — oneDNN convolution and inner product: forward, backward data, backward
// weights, with primitives built once per input layout and shape.
//
// Activations take the layout oneDNN picks (format_tag::any); weights and gradients stay
// plain for the optimizer and the fusion engine and are reordered at the op's edge.
// In bf16 (Context::act) activations are stored in bf16 and the fp32 weights are reordered
// into bf16 for each pass; weight and bias gradients come out in fp32 (oneDNN accumulates
// in fp32), straight into their fusion buckets. Linear writes fp32 logits for the loss.
// A convolution's weight gradient comes from oneDNN's kernel or from one matmul over the
// unfolded input (conv_weight_gemm.hpp), as Context::weight_grad says. With measure, the input
// gradient may come from oneDNN's forward kernel, else from its backward-data kernel: for a
// stride-1 same-size convolution run over dy with the filter transposed and flipped, for a 3x3
// stride-2 one as four convolutions, one per parity of the input pixel
// (conv_input_grad_phases.hpp). The forward kernel is the faster one on some shapes and ISAs.
// With train.conv_algorithm = winograd, measure or auto, a 3x3 stride-1 fp32 convolution may
// run oneDNN's Winograd kernels for all three passes (Context::conv_algorithm).
#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>
#include <utility>

#include "conv_input_grad_phases.hpp"
#include "conv_weight_gemm.hpp"
#include "ops.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::backend::cpu {
namespace {

using conv_fwd = dnnl::convolution_forward;
using conv_bwd_data = dnnl::convolution_backward_data;
using conv_bwd_weights = dnnl::convolution_backward_weights;
using ip_fwd = dnnl::inner_product_forward;
using ip_bwd_data = dnnl::inner_product_backward_data;
using ip_bwd_weights = dnnl::inner_product_backward_weights;

memory::desc any_desc(const memory::dims& dims, dt type) {
  return {dims, type, tag::any};
}

void check_same_shape(const Tensor& t, const Shape& want, const char* op, const char* what) {
  RT_CHECK(t.shape() == want, op, ": ", what, " has shape ", shape_str(t.shape()), ", expected ",
           shape_str(want));
}

// Where a primitive writes its diff weights (in want's layout): the plain gradient dw itself,
// or scratch (then reordered into dw).
memory plain_or_scratch(const Context& ctx, const memory::desc& want, const memory::desc& plain,
                        void* dw, SharedScratch& scratch) {
  if (want == plain) return memory(plain, ctx.engine, dw);
  return memory(want, ctx.engine, scratch.at_least(want.get_size()));
}

// wt = w with each of its `filters` filters of `taps` values turned by 180 degrees, in place
// order (the tap at (kh, kw) of a KxK filter is t = kh * K + kw; turned, K*K-1-t).
void turn_filters(const float* w, int64_t filters, int64_t taps, float* wt) {
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < filters; ++f)
    for (int64_t t = 0; t < taps; ++t) wt[f * taps + t] = w[f * taps + (taps - 1 - t)];
}

class Conv : public ConvOp {
 public:
  Conv(const Context& ctx, const ConvSpec& spec) : ctx_(ctx), s_(spec) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    Plan& p = plan_for(x, w);
    memory src = as_layout(ctx_, x, p.fwd_pd.src_desc(), ctx_.call_scratch.x, x_reorder_);
    memory wts = weights(w, p);
    // The step's copy for backward_data: in w_scratch_ when forward reordered w into it.
    forward_copy_of_ = wts.get_data_handle() == w_scratch_.raw() ? w.raw() : nullptr;
    if (s_.accumulate)
      residual_into_dst(y, p);
    else
      ensure(y, p.y_shape, p.fwd_pd.dst_desc());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, mem_of(ctx_, y)}};
    if (s_.bias) args[DNNL_ARG_BIAS] = mem_of(ctx_, *bias);
    p.fwd.execute(ctx_.stream, args);
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    Plan& p = current("conv backward_data", dy);
    if (data_ == DataPath::kUndecided) decide_data_path(p, dy, w, dx);
    if (!data_ran_) count(data_) += 1;  // counted once it runs: a stem's never does
    data_ran_ = true;
    run_backward_data(p, data_, dy, w, dx, ctx_.call_scratch);
    recount_after_data(p);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    Plan& p = current("conv backward_weights", dy);
    check_same_shape(dw, w_shape(), "conv backward_weights", "dw");
    if (weight_grad_ == Path::kUndecided) decide_weight_grad(p, x, dy, dw, dbias);
    if (weight_grad_ == Path::kGemm && !p.gemm)
      p.gemm = std::make_unique<ConvWeightGemm>(ctx_, s_, p.x_shape, p.y_shape);
    run_weight_grad(p, weight_grad_, x, dy, dw, dbias, ctx_.call_scratch);
    count_algorithm(p);
  }

  // What measure chose, '+'-joined: "gemm" or "onednn" (the weight gradient's path; "onednn"
  // where a bias keeps it oneDNN's), then "forward" where the input gradient runs on the forward
  // kernel (train.conv_weight_grad = measure); "winograd" or "direct", the algorithm of all three
  // passes (train.conv_algorithm = measure). "" until every choice timed here is made.
  std::string weight_grad_choice() const override {
    const bool paths = timed_weight_grad() || timed_data(), algorithm = timed_algorithm();
    if ((!paths && !algorithm) || (paths && weight_grad_ == Path::kUndecided) ||
        (algorithm && algorithm_ == Algorithm::kUndecided))
      return "";
    std::string out;
    if (paths)
      out = std::string(weight_grad_ == Path::kGemm ? "gemm" : "onednn") +
            (data_ == DataPath::kForward ? "+forward" : "");
    if (algorithm)
      out += std::string(out.empty() ? "" : "+") +
             (algorithm_ == Algorithm::kWinograd ? "winograd" : "direct");
    return out;
  }

  WeightGradTimes weight_grad_times() const override { return times_; }

  // Tokens of a choice this convolution does not time (a path without conv_weight_grad =
  // measure, an algorithm without conv_algorithm = measure) are ignored: a checkpoint's choices
  // stay usable by a run that times less.
  void preset_weight_grad(const std::string& choice) override {
    if (choice.empty()) return;
    std::string weights, data, algorithm;
    std::istringstream tokens(choice);
    for (std::string token; std::getline(tokens, token, '+');) {
      std::string* slot = token == "gemm" || token == "onednn"       ? &weights
                          : token == "forward"                       ? &data
                          : token == "winograd" || token == "direct" ? &algorithm
                                                                     : nullptr;
      RT_REQUIRE_INPUT(slot && slot->empty(), "conv backward: unknown paths '", choice,
                       "' (gemm or onednn, then +forward for the input gradient by the forward "
                       "kernel, then +winograd or +direct for the algorithm)");
      *slot = token;
    }
    if (timed_weight_grad() || timed_data()) preset_paths(choice, weights, data);
    if (ctx_.conv_algorithm == ConvAlgorithm::kMeasure && !algorithm.empty())
      preset_algorithm(choice, algorithm);
  }

 private:
  enum class Path { kUndecided, kOnednn, kGemm };
  enum class DataPath { kUndecided, kOnednn, kForward };
  enum class Algorithm { kUndecided, kDirect, kWinograd };

  // No path named (an algorithm alone): the paths are left to measure.
  void preset_paths(const std::string& choice, const std::string& weights,
                    const std::string& data) {
    RT_REQUIRE_INPUT(!weights.empty() || data.empty(), "conv backward: '", choice,
                     "' names the input gradient's path but no weight gradient's (gemm or onednn)");
    if (weights.empty()) return;
    RT_REQUIRE_INPUT(weights == "onednn" || timed_weight_grad(), "conv backward: '", choice,
                     "' for a convolution with a bias, whose weight gradient is oneDNN's (onednn)");
    RT_REQUIRE_INPUT(
        data.empty() || timed_data(), "conv backward: '", choice, "' for a ", s_.kernel, "x",
        s_.kernel, " convolution of stride ", s_.stride, " and padding ", s_.padding,
        "; the forward kernel gives input gradients at stride 1 and padding (kernel - 1) / 2, and "
        "3x3 at stride 2 and padding 1");
    set_weight_grad(weights == "gemm" ? Path::kGemm : Path::kOnednn);
    if (timed_data()) set_data_path(data.empty() ? DataPath::kOnednn : DataPath::kForward);
  }

  // A changed algorithm drops the plans built with the old one (a rank taking rank 0's choice
  // after its first step): the next forward builds them again, and the count follows.
  void preset_algorithm(const std::string& choice, const std::string& algorithm) {
    RT_REQUIRE_INPUT(algorithm == "direct" || winograd_asked(), "conv: '", choice, "' for a ",
                     s_.kernel, "x", s_.kernel, " ", ctx_.act == dt::f32 ? "fp32" : "bf16",
                     " convolution of stride ", s_.stride, " and padding ", s_.padding,
                     "; Winograd takes 3x3 fp32 ones of stride 1 and padding 1");
    if (!winograd_asked()) return;  // direct, as it always is
    const Algorithm want = algorithm == "winograd" ? Algorithm::kWinograd : Algorithm::kDirect;
    if (want == algorithm_) return;
    algorithm_ = want;
    plans_.clear();
    current_ = nullptr;
    forward_copy_of_ = nullptr;
    if (algorithm_counted_) algorithm_count(counted_winograd_) -= 1;
    algorithm_counted_ = counted_winograd_ = false;
  }

  // The weight-gradient path is measure's to choose: measure asked for, and no bias (its
  // gradient is oneDNN's).
  bool timed_weight_grad() const {
    return ctx_.weight_grad == ConvWeightGrad::kMeasure && !s_.bias;
  }
  // The input-gradient path is measure's to choose where the forward kernel can give it: stride
  // 1 and an output of the input's size (dx is then dy convolved with the flipped filter), or
  // 3x3 at stride 2 and padding 1 (by phases, where the input's size and layout let them:
  // ConvInputGradPhases::fits; elsewhere that convolution takes oneDNN's backward data).
  bool timed_data() const {
    return ctx_.weight_grad == ConvWeightGrad::kMeasure && (same_size() || strided_3x3());
  }
  bool same_size() const { return s_.stride == 1 && 2 * s_.padding == s_.kernel - 1; }
  bool strided_3x3() const { return s_.kernel == 3 && s_.stride == 2 && s_.padding == 1; }

  int& count(Path path) const {
    return path == Path::kGemm ? ctx_.conv_path_count.gemm : ctx_.conv_path_count.onednn;
  }
  int& count(DataPath path) const {
    return path == DataPath::kForward ? ctx_.conv_path_count.data_forward
                                      : ctx_.conv_path_count.data_onednn;
  }
  int& algorithm_count(bool winograd) const {
    return winograd ? ctx_.conv_algorithm_count.winograd : ctx_.conv_algorithm_count.direct;
  }

  void set_weight_grad(Path path) {
    if (path == weight_grad_) return;
    if (weight_grad_ != Path::kUndecided) count(weight_grad_) -= 1;
    count(path) += 1;
    weight_grad_ = path;
  }
  void set_data_path(DataPath path) {
    if (path == data_) return;
    if (data_ran_) count(data_) -= 1, count(path) += 1;
    data_ = path;
  }

  struct Plan {
    memory::desc x_md;
    Shape x_shape, y_shape;
    // Each pass's algorithm: Winograd where asked for, fitting and given by oneDNN, else direct.
    dnnl::algorithm fwd_alg = dnnl::algorithm::convolution_direct;
    dnnl::algorithm data_alg = dnnl::algorithm::convolution_direct;
    dnnl::algorithm weights_alg = dnnl::algorithm::convolution_direct;
    conv_fwd::primitive_desc fwd_pd;
    conv_fwd fwd;
    conv_bwd_data::primitive_desc bwd_data_pd;
    conv_bwd_data bwd_data;
    conv_bwd_weights::primitive_desc bwd_weights_pd;
    conv_bwd_weights bwd_weights;
    std::unique_ptr<ConvWeightGemm> gemm;  // made when the gemm path first runs on this shape
    conv_fwd::primitive_desc data_fwd_pd;  // dx = conv(dy, flipped w): the forward data path
    conv_fwd data_fwd;
    std::unique_ptr<ConvInputGradPhases> phases;  // the forward data path at stride 2
  };

  Shape w_shape() const { return {s_.out_channels, s_.in_channels, s_.kernel, s_.kernel}; }

  // Winograd is oneDNN's for 3x3 stride-1 fp32 convolutions (F(4x4, 3x3)); asked for, to be
  // timed or to be ruled on by the deck (train.conv_algorithm = winograd, measure or auto),
  // tried there, and direct wherever oneDNN has no Winograd kernel for a pass.
  bool winograd_asked() const {
    return ctx_.conv_algorithm != ConvAlgorithm::kDirect && ctx_.act == dt::f32 && s_.kernel == 3 &&
           s_.stride == 1 && s_.padding == 1;
  }
  // The algorithm is measure's to choose: a convolution Winograd may take, with measure.
  bool timed_algorithm() const {
    return ctx_.conv_algorithm == ConvAlgorithm::kMeasure && winograd_asked();
  }
  // auto's rule for an output of shape y (each batch shape its own), fitted to oneDNN 2.6's
  // three passes timed alone at 1 and 2 threads (docs/TUNING.md, "auto"): Winograd transforms
  // the filter once per channel pair and each 4x4 output tile once per channel, so it pays from
  // 32 channels on the narrower side, with at least 64 tiles in the batch and 8192 tiles times
  // that width (32 channels want 256 tiles).
  bool winograd_pays(const Shape& y) const {
    const int64_t tiles = y[0] * ((y[2] + 3) / 4) * ((y[3] + 3) / 4);
    const int64_t narrower = std::min(s_.in_channels, s_.out_channels);
    return narrower >= 32 && tiles >= 64 && tiles * narrower >= 8192;
  }
  // measure's choice for a convolution, on the x and w of its first forward (later batch shapes,
  // each with a plan of its own, keep it): the forward pass timed with each algorithm
  // (interleaved medians, as the weight-gradient paths are timed) into scratch given back after;
  // the faster algorithm then takes all three passes (the backward passes follow the forward one
  // on the widths measured: docs/TUNING.md).
  bool winograd_is_faster(const Tensor& x, const Tensor& w, const conv_fwd::primitive_desc& wino,
                          const conv_fwd::primitive_desc& direct) {
    CallScratch timing;
    CachedReorder x_a, w_a, x_b, w_b;
    const auto prepare = [&](const conv_fwd::primitive_desc& pd, SharedScratch& xs,
                             SharedScratch& ws, SharedScratch& ys, CachedReorder& xr,
                             CachedReorder& wr) {
      const memory::desc& y_md = pd.dst_desc();
      void* y = ys.at_least(y_md.get_size());
      std::memset(y, 0, y_md.get_size());  // read by a sum post-op: no denormals or NaNs
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, as_layout(ctx_, x, pd.src_desc(), xs, xr)},
          {DNNL_ARG_WEIGHTS, as_layout(ctx_, w, pd.weights_desc(), ws, wr)},
          {DNNL_ARG_DST, memory(y_md, ctx_.engine, y)}};
      if (s_.bias) {
        void* b = timing.second.at_least(pd.bias_desc().get_size());
        std::memset(b, 0, pd.bias_desc().get_size());
        args[DNNL_ARG_BIAS] = memory(pd.bias_desc(), ctx_.engine, b);
      }
      return args;
    };
    const auto wino_args = prepare(wino, timing.x, timing.weights, timing.col, x_a, w_a);
    const auto direct_args = prepare(direct, timing.dy, timing.filters, timing.product, x_b, w_b);
    conv_fwd wino_prim(wino), direct_prim(direct);
    const auto [wino_ms, direct_ms] =
        interleaved_medians_ms([&] { wino_prim.execute(ctx_.stream, wino_args); },
                               [&] { direct_prim.execute(ctx_.stream, direct_args); });
    return wino_ms < direct_ms;
  }

  // pd from make() where oneDNN gives a Winograd primitive for it; false where it refuses.
  template <typename Pd, typename Make>
  static bool winograd_pd(Pd& pd, Make&& make) {
    try {
      pd = make();
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
  // A backward pass's primitive (pd from make(algorithm)): by Winograd where the forward pass
  // took it and oneDNN gives one for this pass, else direct; returns the algorithm it took.
  template <typename Pd, typename Make>
  static dnnl::algorithm backward_pd(const Plan& p, Pd& pd, const char* what, Make&& make) {
    const auto winograd = dnnl::algorithm::convolution_winograd;
    if (p.fwd_alg == winograd && winograd_pd(pd, [&] { return make(winograd); })) return winograd;
    pd = dnnl_try(what, [&] { return make(dnnl::algorithm::convolution_direct); });
    return dnnl::algorithm::convolution_direct;
  }
  // Counted once per convolution, after its first weight-gradient pass: Winograd where every
  // pass that ran on oneDNN's convolution kernels had it (a weight gradient by the matmul, or
  // an input gradient by the forward kernel over the flipped filter, counts as direct; a
  // network's first convolution never computes an input gradient).
  void count_algorithm(const Plan& p) {
    if (algorithm_counted_ || ctx_.conv_algorithm == ConvAlgorithm::kDirect) return;
    algorithm_counted_ = true;
    const auto wino = [](dnnl::algorithm a) { return a == dnnl::algorithm::convolution_winograd; };
    const bool data = !data_ran_ || (data_ == DataPath::kOnednn && wino(p.data_alg));
    counted_winograd_ =
        wino(p.fwd_alg) && weight_grad_ == Path::kOnednn && wino(p.weights_alg) && data;
    algorithm_count(counted_winograd_) += 1;
  }
  // The input gradient runs after the weight gradient: where its first pass is not Winograd,
  // the count moves to direct.
  void recount_after_data(const Plan& p) {
    if (!counted_winograd_ ||
        (data_ == DataPath::kOnednn && p.data_alg == dnnl::algorithm::convolution_winograd))
      return;
    counted_winograd_ = false;
    algorithm_count(true) -= 1;
    algorithm_count(false) += 1;
  }

  // This plan's input gradient by the forward kernel: at stride 1 always, at stride 2 by phases.
  bool forward_data_fits(const Plan& p) const {
    return same_size() || ConvInputGradPhases::fits(s_, p.x_shape, p.fwd_pd.src_desc());
  }

  // The convolution's weight-gradient path, once, at its first backward pass (later batch
  // shapes take the same): as Context::weight_grad says, or with measure the faster of the two
  // over a few interleaved runs on these very tensors (their outputs are overwritten by the
  // call that follows). A bias gradient is oneDNN's alone.
  void decide_weight_grad(Plan& p, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) {
    Path path = Path::kOnednn;
    if (!s_.bias && ctx_.weight_grad != ConvWeightGrad::kOnednn) {
      p.gemm = std::make_unique<ConvWeightGemm>(ctx_, s_, p.x_shape, p.y_shape);
      path = Path::kGemm;
      if (ctx_.weight_grad == ConvWeightGrad::kMeasure) {
        // Both paths are timed in scratch of their own, given back with the decision: the
        // backend's shared scratch grows only for the paths that run (a convolution that keeps
        // oneDNN's kernel leaves none of the matmul's behind).
        CallScratch timing;
        std::tie(times_.onednn_ms, times_.gemm_ms) = interleaved_medians_ms(
            [&] { run_weight_grad(p, Path::kOnednn, x, dy, dw, dbias, timing); },
            [&] { run_weight_grad(p, Path::kGemm, x, dy, dw, dbias, timing); });
        if (times_.onednn_ms < times_.gemm_ms) path = Path::kOnednn;
      }
    }
    if (path != Path::kGemm) p.gemm.reset();
    set_weight_grad(path);
  }

  // The median milliseconds of `a` and of `b` over 5 runs each, taken in turns (a, b, a, b,
  // ...) after one untimed run of each, so that a change in the machine's load weighs on both.
  template <typename RunA, typename RunB>
  std::pair<double, double> interleaved_medians_ms(RunA&& a, RunB&& b) {
    constexpr int kRuns = 5;
    timed_ms(a);  // untimed: first-call allocations and primitive set-up
    timed_ms(b);
    std::vector<double> ms_a, ms_b;
    for (int r = 0; r < kRuns; ++r) {
      ms_a.push_back(timed_ms(a));
      ms_b.push_back(timed_ms(b));
    }
    return {median(ms_a), median(ms_b)};  // core/timer.hpp
  }

  template <typename Run>
  double timed_ms(Run& run) {
    Stopwatch watch;
    run();
    dnnl::stream(ctx_.stream).wait();  // a handle copy: the ops hold a const Context
    return 1e3 * watch.seconds();
  }

  // The input-gradient path, once, at the first backward pass, as the weight gradient's: with
  // measure the faster of oneDNN's backward-data kernel and the forward kernel over a few
  // interleaved runs on these tensors (dx is overwritten by the call that follows), else oneDNN's.
  void decide_data_path(Plan& p, const Tensor& dy, const Tensor& w, Tensor& dx) {
    DataPath path = DataPath::kOnednn;
    if (timed_data() && forward_data_fits(p)) {
      CallScratch timing;  // as decide_weight_grad's
      std::tie(times_.data_onednn_ms, times_.data_forward_ms) = interleaved_medians_ms(
          [&] { run_backward_data(p, DataPath::kOnednn, dy, w, dx, timing); },
          [&] { run_backward_data(p, DataPath::kForward, dy, w, dx, timing); });
      if (times_.data_forward_ms < times_.data_onednn_ms) path = DataPath::kForward;
    }
    set_data_path(path);
  }

  // scratch: the backend's shared scratch, or measure's own while it times the paths.
  void run_backward_data(Plan& p, DataPath path, const Tensor& dy, const Tensor& w, Tensor& dx,
                         CallScratch& scratch) {
    if (path == DataPath::kForward && same_size())
      backward_data_by_forward(p, dy, w, dx, scratch);
    else if (path == DataPath::kForward && forward_data_fits(p))
      backward_data_by_phases(p, dy, w, dx, scratch);
    else
      onednn_backward_data(p, dy, w, dx, scratch);
  }

  void onednn_backward_data(Plan& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                            CallScratch& scratch) {
    if (!p.bwd_data) build_backward_data(p);
    memory ddst = as_layout(ctx_, dy, p.bwd_data_pd.diff_dst_desc(), scratch.dy, dy_reorder_);
    memory wts = as_layout(ctx_, weights_for_backward(w, p), p.bwd_data_pd.weights_desc(),
                           scratch.weights, wb_reorder_);
    ensure(dx, p.x_shape, p.bwd_data_pd.diff_src_desc());
    p.bwd_data.execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, ddst},
                                     {DNNL_ARG_WEIGHTS, wts},
                                     {DNNL_ARG_DIFF_SRC, mem_of(ctx_, dx)}});
  }

  // dx[n, i] = sum over o of dy[n, o] convolved with w[o, i] turned by 180 degrees, at the same
  // padding: a forward convolution from O channels to I with the filter wt[i, o, kh, kw] =
  // w[o, i, K-1-kh, K-1-kw]. The plain fp32 filters are turned in place order, and the reorder
  // into the kernel's layout (rounding to bf16 in bf16 runs, as every weight reorder does)
  // reads them as [i, o, k, k] through strides, which swaps the channels: a third faster than
  // writing the swap ourselves for a 512x512 filter (docs/TUNING.md).
  void backward_data_by_forward(Plan& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                                CallScratch& scratch) {
    if (!p.data_fwd) build_data_forward(p);
    memory src = as_layout(ctx_, dy, p.data_fwd_pd.src_desc(), scratch.dy, dy_reorder_);
    const int64_t in = s_.in_channels, out = s_.out_channels, k = s_.kernel, taps = k * k;
    const memory::desc swapped({in, out, k, k}, dt::f32, memory::dims{taps, in * taps, k, 1});
    void* turned = scratch.filters.at_least(swapped.get_size());
    turn_filters(static_cast<const float*>(w.raw()), out * in, taps, static_cast<float*>(turned));
    memory wts = as_layout(ctx_, memory(swapped, ctx_.engine, turned), p.data_fwd_pd.weights_desc(),
                           scratch.weights, wf_reorder_);
    ensure(dx, p.x_shape, p.data_fwd_pd.dst_desc());
    p.data_fwd.execute(
        ctx_.stream,
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, mem_of(ctx_, dx)}});
  }

  // dx from four forward convolutions over dy, one per parity of the input pixel
  // (conv_input_grad_phases.hpp), in the layout forward read x.
  void backward_data_by_phases(Plan& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                               CallScratch& scratch) {
    if (!p.phases)
      p.phases =
          std::make_unique<ConvInputGradPhases>(ctx_, s_, p.fwd_pd.dst_desc(), p.fwd_pd.src_desc());
    ensure(dx, p.x_shape, p.fwd_pd.src_desc());
    p.phases->run(mem_of(ctx_, dy), static_cast<const float*>(w.raw()), mem_of(ctx_, dx), scratch);
  }

  // scratch: the backend's shared scratch, or measure's own while it times the paths.
  void run_weight_grad(Plan& p, Path path, const Tensor& x, const Tensor& dy, Tensor& dw,
                       Tensor* dbias, CallScratch& scratch) {
    if (path == Path::kGemm)
      p.gemm->run(mem_of(ctx_, x), mem_of(ctx_, dy), static_cast<float*>(dw.raw()), scratch);
    else
      onednn_backward_weights(p, x, dy, dw, dbias, scratch);
  }

  void onednn_backward_weights(Plan& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                               Tensor* dbias, CallScratch& scratch) {
    if (!p.bwd_weights) build_backward_weights(p);
    const Shape w_shape = this->w_shape();
    memory src = as_layout(ctx_, x, p.bwd_weights_pd.src_desc(), scratch.x, x_reorder_);
    memory ddst = as_layout(ctx_, dy, p.bwd_weights_pd.diff_dst_desc(), scratch.dy, dy_reorder_);
    memory::desc plain = plain_desc(w_shape);
    memory dwts = plain_or_scratch(ctx_, p.bwd_weights_pd.diff_weights_desc(), plain, dw.raw(),
                                   scratch.weights);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwts}};
    if (s_.bias) args[DNNL_ARG_DIFF_BIAS] = mem_of(ctx_, *dbias);
    p.bwd_weights.execute(ctx_.stream, args);
    if (dwts.get_data_handle() != dw.raw())
      dw_reorder_.run(ctx_, dwts, memory(plain, ctx_.engine, dw.raw()));
  }

  // The weights in the primitive's layout. Inference weights are constant (ConvSpec): they
  // are reordered on the first call and then again only when handed another tensor.
  memory weights(const Tensor& w, const Plan& p) {
    const memory::desc& want = p.fwd_pd.weights_desc();
    if (!s_.inference) return as_layout(ctx_, w, want, w_scratch_, w_reorder_);
    if (prepared_from_ != w.raw() || prepared_.get_desc() != want) {
      prepared_ = as_layout(ctx_, w, want, w_scratch_, w_reorder_);
      prepared_from_ = w.raw();
    }
    return prepared_;
  }

  // Where backward-data reads its weights from: the copy this step's forward made of the same
  // w (current_ is that forward's plan), else w itself. Same values either way; in bf16 the
  // copy is half the bytes to read (docs/TUNING.md, "Weight reorders in a bf16 step").
  memory weights_for_backward(const Tensor& w, const Plan& p) {
    if (forward_copy_of_ == w.raw())
      return memory(p.fwd_pd.weights_desc(), ctx_.engine, w_scratch_.raw());
    return mem_of(ctx_, w);
  }

  // y holds the residual the sum post-op adds: brought into the destination's layout when
  // its producer chose another (into a scratch of this op's, reused every call).
  void residual_into_dst(Tensor& y, const Plan& p) {
    RT_CHECK(!y.empty() && y.shape() == p.y_shape, "conv accumulate: the residual has shape ",
             shape_str(y.shape()), ", expected ", shape_str(p.y_shape));
    const memory::desc& want = p.fwd_pd.dst_desc();
    if (desc_of(y) == want) return;
    as_layout(ctx_, y, want, residual_scratch_, residual_reorder_);  // reorders into the scratch
    y = residual_scratch_;
  }

  memory::dims strides() const { return {s_.stride, s_.stride}; }
  memory::dims pads() const { return {s_.padding, s_.padding}; }

  // w: the filter of the first forward on this shape, which measure times the algorithms on.
  Plan& plan_for(const Tensor& x, const Tensor& w) {
    memory::desc x_md = desc_of(x);
    for (auto& p : plans_)
      if (p->x_md == x_md) return *(current_ = p.get());
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.in_channels, "conv: input ", shape_str(x.shape()),
             " does not have ", s_.in_channels, " channels");
    auto p = std::make_unique<Plan>();
    p->x_md = x_md;
    p->x_shape = x.shape();
    int64_t oh = (x.dim(2) + 2 * s_.padding - s_.kernel) / s_.stride + 1;
    int64_t ow = (x.dim(3) + 2 * s_.padding - s_.kernel) / s_.stride + 1;
    p->y_shape = {x.dim(0), s_.out_channels, oh, ow};
    memory::desc bias_md =
        s_.bias ? memory::desc({s_.out_channels}, dt::f32, tag::any) : memory::desc();
    // forward_training for inference too: with forward_inference oneDNN 2.6 picks brgconv
    // kernels that ran resnet18_cifar's inference slower here (measured: docs/MODEL_FILE.md).
    const auto d = [&](dnnl::algorithm alg) {
      return conv_fwd::desc(dnnl::prop_kind::forward_training, alg,
                            any_desc(to_dims(x.shape()), ctx_.act),
                            any_desc(weight_dims(), ctx_.act), bias_md,
                            any_desc(to_dims(p->y_shape), ctx_.act), strides(), pads(), pads());
    };
    dnnl::primitive_attr attr;
    dnnl::post_ops ops;
    if (s_.accumulate) ops.append_sum(1.0f);  // before the ReLU: relu(conv + residual)
    if (s_.fuse_relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
    const auto make = [&](dnnl::algorithm alg) {
      return conv_fwd::primitive_desc(d(alg), attr, ctx_.engine);
    };
    p->fwd_pd = dnnl_try("conv forward", [&] { return make(dnnl::algorithm::convolution_direct); });
    // The algorithm: under auto the rule's for each batch shape, so a shape runs the same
    // kernels in every run (a resumed run's first batch, a last partial one, an evaluation's);
    // else decided at the first forward (direct where oneDNN has no Winograd kernel for that
    // shape) and kept for later shapes wherever oneDNN has one for them.
    const bool by_shape = ctx_.conv_algorithm == ConvAlgorithm::kAuto;
    const bool may_winograd = winograd_asked() && (by_shape ? winograd_pays(p->y_shape)
                                                            : algorithm_ != Algorithm::kDirect);
    conv_fwd::primitive_desc winograd;
    const bool has_winograd = may_winograd && winograd_pd(winograd, [&] {
                                return make(dnnl::algorithm::convolution_winograd);
                              });
    if (!by_shape && algorithm_ == Algorithm::kUndecided && winograd_asked())
      algorithm_ = has_winograd && (ctx_.conv_algorithm == ConvAlgorithm::kWinograd ||
                                    winograd_is_faster(x, w, winograd, p->fwd_pd))
                       ? Algorithm::kWinograd
                       : Algorithm::kDirect;
    if (has_winograd && (by_shape || algorithm_ == Algorithm::kWinograd)) {
      p->fwd_pd = winograd;
      p->fwd_alg = dnnl::algorithm::convolution_winograd;
    }
    p->fwd = conv_fwd(p->fwd_pd);
    plans_.push_back(std::move(p));
    return *(current_ = plans_.back().get());
  }

  Plan& current(const char* op, const Tensor& dy) {
    RT_CHECK(!s_.inference, op, " of an inference convolution");
    RT_CHECK(current_ != nullptr, op, " before forward");
    check_same_shape(dy, current_->y_shape, op, "dy");
    return *current_;
  }

  memory::dims weight_dims() const {
    return {s_.out_channels, s_.in_channels, s_.kernel, s_.kernel};
  }

  void build_backward_data(Plan& p) {
    const auto pd = [&](dnnl::algorithm alg) {
      auto d = conv_bwd_data::desc(alg, p.fwd_pd.src_desc(), any_desc(weight_dims(), ctx_.act),
                                   p.fwd_pd.dst_desc(), strides(), pads(), pads());
      return conv_bwd_data::primitive_desc(d, ctx_.engine, p.fwd_pd);
    };
    p.data_alg = backward_pd(p, p.bwd_data_pd, "conv backward data", pd);
    p.bwd_data = conv_bwd_data(p.bwd_data_pd);
  }

  void build_backward_weights(Plan& p) {
    memory::desc bias_md =
        s_.bias ? memory::desc({s_.out_channels}, dt::f32, tag::a) : memory::desc();
    const auto pd = [&](dnnl::algorithm alg) {
      auto d = conv_bwd_weights::desc(alg, p.fwd_pd.src_desc(), any_desc(weight_dims(), dt::f32),
                                      bias_md, p.fwd_pd.dst_desc(), strides(), pads(), pads());
      return conv_bwd_weights::primitive_desc(d, ctx_.engine, p.fwd_pd);
    };
    p.weights_alg = backward_pd(p, p.bwd_weights_pd, "conv backward weights", pd);
    p.bwd_weights = conv_bwd_weights(p.bwd_weights_pd);
  }

  // dy in the layout forward wrote y, dx in the layout forward read x: no activation reorder.
  void build_data_forward(Plan& p) {
    auto d = conv_fwd::desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p.fwd_pd.dst_desc(),
        any_desc({s_.in_channels, s_.out_channels, s_.kernel, s_.kernel}, ctx_.act), memory::desc(),
        p.fwd_pd.src_desc(), strides(), pads(), pads());
    p.data_fwd_pd = dnnl_try("conv backward data by the forward kernel",
                             [&] { return conv_fwd::primitive_desc(d, ctx_.engine); });
    p.data_fwd = conv_fwd(p.data_fwd_pd);
  }

  const Context& ctx_;
  ConvSpec s_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* current_ = nullptr;
  // w_scratch_: forward's weights, kept for backward_data (weights_for_backward); what a call
  // needs only while it runs is in ctx_.call_scratch.
  Tensor w_scratch_, residual_scratch_;
  CachedReorder x_reorder_, w_reorder_, wb_reorder_, wf_reorder_, dy_reorder_, dw_reorder_,
      residual_reorder_;
  memory prepared_;  // inference: the weights in the primitive's layout, from prepared_from_
  const void* prepared_from_ = nullptr;
  Path weight_grad_ = Path::kUndecided;          // for every batch shape: one choice a convolution
  Algorithm algorithm_ = Algorithm::kUndecided;  // likewise, at its first forward (not auto's)
  DataPath data_ = DataPath::kUndecided;         // likewise
  bool data_ran_ = false;                        // an input gradient was computed (and counted)
  bool algorithm_counted_ = false;               // in ctx_.conv_algorithm_count
  bool counted_winograd_ = false;                // ... as Winograd
  const void* forward_copy_of_ = nullptr;        // the w whose forward copy w_scratch_ holds
  WeightGradTimes times_;                        // what measure timed, when it did
};

class Linear : public LinearOp {
 public:
  Linear(const Context& ctx, const LinearSpec& spec) : ctx_(ctx), s_(spec) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    Plan& p = plan_for(x);
    memory src = as_layout(ctx_, x, p.fwd_pd.src_desc(), ctx_.call_scratch.x, x_reorder_);
    memory wts = as_layout(ctx_, memory(p.w_plain, ctx_.engine, w.raw()), p.fwd_pd.weights_desc(),
                           ctx_.call_scratch.weights, w_reorder_);
    ensure(y, p.y_shape, p.fwd_pd.dst_desc());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, mem_of(ctx_, y)}};
    if (s_.bias) args[DNNL_ARG_BIAS] = mem_of(ctx_, *bias);
    p.fwd.execute(ctx_.stream, args);
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    Plan& p = current("linear backward_data", dy);
    if (!p.bwd_data) {
      auto d = ip_bwd_data::desc(p.fwd_pd.src_desc(), weights_desc(p, ctx_.act), diff_dst_desc(p));
      p.bwd_data_pd = dnnl_try("linear backward data", [&] {
        return ip_bwd_data::primitive_desc(d, ctx_.engine, p.fwd_pd);
      });
      p.bwd_data = ip_bwd_data(p.bwd_data_pd);
    }
    memory ddst =
        as_layout(ctx_, dy, p.bwd_data_pd.diff_dst_desc(), ctx_.call_scratch.dy, dy_reorder_);
    memory wts = as_layout(ctx_, memory(p.w_plain, ctx_.engine, w.raw()),
                           p.bwd_data_pd.weights_desc(), ctx_.call_scratch.weights, wb_reorder_);
    ensure(dx, p.x_shape, p.bwd_data_pd.diff_src_desc());
    p.bwd_data.execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, ddst},
                                     {DNNL_ARG_WEIGHTS, wts},
                                     {DNNL_ARG_DIFF_SRC, mem_of(ctx_, dx)}});
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    Plan& p = current("linear backward_weights", dy);
    if (!p.bwd_weights) {
      memory::desc bias_md =
          s_.bias ? memory::desc({s_.out_features}, dt::f32, tag::a) : memory::desc();
      auto d = ip_bwd_weights::desc(p.fwd_pd.src_desc(), weights_desc(p, dt::f32), bias_md,
                                    diff_dst_desc(p));
      p.bwd_weights_pd = dnnl_try("linear backward weights", [&] {
        return ip_bwd_weights::primitive_desc(d, ctx_.engine, p.fwd_pd);
      });
      p.bwd_weights = ip_bwd_weights(p.bwd_weights_pd);
    }
    check_same_shape(dw, Shape{s_.out_features, s_.in_features}, "linear backward_weights", "dw");
    memory src = as_layout(ctx_, x, p.bwd_weights_pd.src_desc(), ctx_.call_scratch.x, x_reorder_);
    memory ddst =
        as_layout(ctx_, dy, p.bwd_weights_pd.diff_dst_desc(), ctx_.call_scratch.dy, dy_reorder_);
    memory dwts = plain_or_scratch(ctx_, p.bwd_weights_pd.diff_weights_desc(), p.w_plain, dw.raw(),
                                   ctx_.call_scratch.weights);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwts}};
    if (s_.bias) args[DNNL_ARG_DIFF_BIAS] = mem_of(ctx_, *dbias);
    p.bwd_weights.execute(ctx_.stream, args);
    if (dwts.get_data_handle() != dw.raw())
      dw_reorder_.run(ctx_, dwts, memory(p.w_plain, ctx_.engine, dw.raw()));
  }

 private:
  struct Plan {
    memory::desc x_md, w_plain;
    Shape x_shape, y_shape, w_shape;
    ip_fwd::primitive_desc fwd_pd;
    ip_fwd fwd;
    ip_bwd_data::primitive_desc bwd_data_pd;
    ip_bwd_data bwd_data;
    ip_bwd_weights::primitive_desc bwd_weights_pd;
    ip_bwd_weights bwd_weights;
  };

  Plan& plan_for(const Tensor& x) {
    memory::desc x_md = desc_of(x);
    for (auto& p : plans_)
      if (p->x_md == x_md) return *(current_ = p.get());
    int64_t features = x.numel() / x.dim(0);
    RT_CHECK(features == s_.in_features, "linear: input ", shape_str(x.shape()), " has ", features,
             " features per image, the layer takes ", s_.in_features);
    auto p = std::make_unique<Plan>();
    p->x_md = x_md;
    p->x_shape = x.shape();
    p->y_shape = {x.dim(0), s_.out_features};
    // A 4-D input is read in place: the weight [out, C*H*W] is seen as [out, C, H, W].
    p->w_shape = x.rank() == 4 ? Shape{s_.out_features, x.dim(1), x.dim(2), x.dim(3)}
                               : Shape{s_.out_features, s_.in_features};
    p->w_plain = plain_desc(p->w_shape);
    memory::desc bias_md =
        s_.bias ? memory::desc({s_.out_features}, dt::f32, tag::a) : memory::desc();
    auto d = ip_fwd::desc(dnnl::prop_kind::forward_training, any_desc(to_dims(x.shape()), ctx_.act),
                          weights_desc(*p, ctx_.act), bias_md, plain_desc(p->y_shape));
    p->fwd_pd = dnnl_try("linear forward", [&] { return ip_fwd::primitive_desc(d, ctx_.engine); });
    p->fwd = ip_fwd(p->fwd_pd);
    plans_.push_back(std::move(p));
    return *(current_ = plans_.back().get());
  }

  // fp32 weights as the model keeps them (and their gradient as the fusion buckets take it):
  // oneDNN's gemm-based inner product reads and writes them in place, where its choice of
  // layout cost a reorder of the weights forward and of their gradient backward, each step
  // (docs/TUNING.md). bf16 runs convert the weights anyway: oneDNN picks their layout.
  memory::desc weights_desc(const Plan& p, dt type) const {
    return ctx_.act == dt::f32 ? p.w_plain : any_desc(to_dims(p.w_shape), type);
  }

  Plan& current(const char* op, const Tensor& dy) {
    RT_CHECK(current_ != nullptr, op, " before forward");
    check_same_shape(dy, current_->y_shape, op, "dy");
    return *current_;
  }

  // The output is fp32 (logits for the loss); in bf16 its gradient goes back in bf16, the
  // data type oneDNN's bf16 backward passes take.
  memory::desc diff_dst_desc(const Plan& p) const {
    if (ctx_.act == dt::f32) return p.fwd_pd.dst_desc();
    return any_desc(to_dims(p.y_shape), ctx_.act);
  }

  const Context& ctx_;
  LinearSpec s_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* current_ = nullptr;
  CachedReorder x_reorder_, w_reorder_, wb_reorder_, dy_reorder_, dw_reorder_;
};

}  // namespace

std::unique_ptr<ConvOp> make_conv(const Context& ctx, const ConvSpec& spec) {
  return std::make_unique<Conv>(ctx, spec);
}
std::unique_ptr<LinearOp> make_linear(const Context& ctx, const LinearSpec& spec) {
  return std::make_unique<Linear>(ctx, spec);
}

}  // namespace ringtrain::backend::cpu
