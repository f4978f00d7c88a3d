// conv_linear.cpp — cuDNN convolution and cuBLAS linear layers: forward, backward data,
// backward weights, in fp32, tf32 or on bf16/fp16 tensor cores. Convolution algorithms are
// measured by cudnnFind*AlgorithmEx once per input shape and the fastest allowed one kept
// (within train.cudnn_workspace_mib); under train.deterministic, cuDNN's heuristic order
// instead and the first deterministic one.
#include <limits>
#include <vector>

#include "../algorithm_choice.hpp"
#include "column_sum_plan.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

const float kOne = 1.0f, kZero = 0.0f;

// out[c] = sum over rows of the row-major [rows, cols] m (any element type), fp32: a bias
// gradient, through the two-pass column sum with its partials in scratch.
void column_sums(Context& ctx, const Tensor& m, int64_t rows, int64_t cols, Tensor& out,
                 Tensor& scratch) {
  ctx.ensure(scratch, {column_sum_plan(rows, cols).scratch_floats});
  kernels::column_sums_typed(m.raw(), elem_of(m.dtype()), rows, cols, out.f32(), scratch.f32(),
                             ctx.stream());
}

void check_shape(const Tensor& t, const Shape& want, const char* op, const char* what) {
  RT_CHECK(t.shape() == want, op, ": ", what, " has shape ", shape_str(t.shape()), ", expected ",
           shape_str(want));
}

int as_int(int64_t v, const char* what) {
  RT_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuda backend: ", what, " ", v,
           " exceeds the int range of cuDNN/cuBLAS");
  return int(v);
}

// One convolution direction's measured choice; the math type is set on the descriptor
// before each call, as cuDNN measured the algorithm with it.
struct Choice {
  int algo = 0;
  size_t memory = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// `ranked`: perf is cuDNN's heuristic answer (no times), best first; its rank stands in for
// the time, so the rule keeps the first allowed one.
template <typename Perf>
Choice choose(const std::vector<Perf>& perf, int returned, bool ranked, const Context& ctx,
              const std::string& what) {
  std::vector<AlgorithmTrial> trials;
  for (int i = 0; i < returned; ++i)
    trials.push_back({int(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS,
                      ranked ? float(i) : perf[i].time, perf[i].memory,
                      perf[i].determinism == CUDNN_DETERMINISTIC});
  const Perf& p =
      perf[choose_algorithm(trials, ctx.workspace_limit_mib(), ctx.deterministic(), what)];
  return {int(p.algo), p.memory, p.mathType};
}

class Conv : public ConvOp {
 public:
  Conv(Context& ctx, const ConvSpec& spec)
      : ctx_(ctx), s_(spec), act_(ctx.act_dtype()), krsc_(ctx.channels_last()) {
    // Beside NHWC activations the filters are KRSC (NHWC order), as tensor-core kernels read
    // them.
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_.get(), cudnn_type(act_),
                                           krsc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           s_.out_channels, s_.in_channels, s_.kernel, s_.kernel));
    // Accumulation in fp32 whatever the data (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configs).
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_.get(), s_.padding, s_.padding, s_.stride,
                                                s_.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), ctx_.conv_math()));
    set_4d(bias_desc_, CUDNN_TENSOR_NCHW, cudnn_type(act_), 1, s_.out_channels, 1, 1);
    CUDNN_CHECK(cudnnSetActivationDescriptor(relu_desc_.get(), CUDNN_ACTIVATION_RELU,
                                             CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  // y = relu(conv(x) + bias + z): with a bias and a ReLU in one cuDNN kernel
  // (cudnnConvolutionBiasActivationForward, on the measured algorithm), else as up to four
  // launches. z, an inference residual (ConvSpec::accumulate), arrives in y; y then gets
  // memory of its own, as cuDNN reads z while it writes y.
  void forward(const Tensor& x_in, const Tensor& w, const Tensor* bias, Tensor& y) override {
    ctx_.activate();
    expect_f32(w, "conv w");
    const Tensor& x = ctx_.as_act(x_in, x_cast_);
    const Tensor& wa = weights(w);
    Plan& p = plan_for(x, wa);
    const Tensor* z = s_.accumulate ? &take_residual(y, p) : nullptr;
    ctx_.ensure_act(y, p.y_shape);
    const Tensor* b = nullptr;
    if (s_.bias) {
      RT_CHECK(bias != nullptr, "conv forward: the layer has a bias but none was passed");
      b = &ctx_.as(*bias, act_, false, bias_cast_);
    }
    const std::shared_ptr<void> ws = use(p.fwd);
    if (b != nullptr && s_.fuse_relu) {
      const bool fused = fusable_ && run_fused(p, x, wa, ws.get(), z, *b, y);
      if (!counted_) (fused ? ctx_.conv_relu_count().fused : ctx_.conv_relu_count().separate) += 1;
      counted_ = true;
      if (fused) return;
    }
    CUDNN_CHECK(cudnnConvolutionForward(ctx_.cudnn(), &kOne, p.x_desc.get(), x.raw(), w_desc_.get(),
                                        wa.raw(), conv_desc_.get(),
                                        cudnnConvolutionFwdAlgo_t(p.fwd.algo), ws.get(),
                                        p.fwd.memory, &kZero, p.y_desc.get(), y.raw()));
    if (z != nullptr)
      kernels::add_typed(y.raw(), z->raw(), y.raw(), elem_of(act_), y.numel(), false,
                         ctx_.stream());
    if (b != nullptr)
      CUDNN_CHECK(cudnnAddTensor(ctx_.cudnn(), &kOne, bias_desc_.get(), b->raw(), &kOne,
                                 p.y_desc.get(), y.raw()));
    if (s_.fuse_relu)
      CUDNN_CHECK(cudnnActivationForward(ctx_.cudnn(), relu_desc_.get(), &kOne, p.y_desc.get(),
                                         y.raw(), &kZero, p.y_desc.get(), y.raw()));
  }

  void backward_data(const Tensor& dy_in, const Tensor& w, Tensor& dx) override {
    ctx_.activate();
    expect_f32(w, "conv w");
    Plan& p = current("conv backward_data", dy_in);
    const Tensor& dy = ctx_.as_act(dy_in, dy_cast_);
    // The forward's converted copy when w is the forward's (ConvOp's contract: unchanged
    // since), so a step converts each filter once.
    const Tensor& wa = krsc_ && cast_of_ == w.raw() ? w_cast_ : weights(w);
    ctx_.ensure_act(dx, p.x_shape);
    const std::shared_ptr<void> ws = use(p.bwd_data);
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        ctx_.cudnn(), &kOne, w_desc_.get(), wa.raw(), p.y_desc.get(), dy.raw(), conv_desc_.get(),
        cudnnConvolutionBwdDataAlgo_t(p.bwd_data.algo), ws.get(), p.bwd_data.memory, &kZero,
        p.x_desc.get(), dx.raw()));
  }

  // dw and dbias are plain fp32 whatever the activations: KRSC (16-bit or tf32) filter
  // gradients are converted from cuDNN's output, NHWC bias gradients summed in fp32 from dy.
  void backward_weights(const Tensor& x_in, const Tensor& dy_in, Tensor& dw,
                        Tensor* dbias) override {
    ctx_.activate();
    Plan& p = current("conv backward_weights", dy_in);
    check_shape(dw, {s_.out_channels, s_.in_channels, s_.kernel, s_.kernel},
                "conv backward_weights", "dw");
    expect_f32(dw, "conv dw");
    const Tensor& x = ctx_.as_act(x_in, x_cast_);
    const Tensor& dy = ctx_.as_act(dy_in, dy_cast_);
    if (krsc_) ctx_.ensure_as(dw_cast_, dw.shape(), act_, true);
    Tensor& out = krsc_ ? dw_cast_ : dw;
    const std::shared_ptr<void> ws = use(p.bwd_filter);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        ctx_.cudnn(), &kOne, p.x_desc.get(), x.raw(), p.y_desc.get(), dy.raw(), conv_desc_.get(),
        cudnnConvolutionBwdFilterAlgo_t(p.bwd_filter.algo), ws.get(), p.bwd_filter.memory, &kZero,
        w_desc_.get(), out.raw()));
    if (krsc_) {
      ctx_.convert(dw_cast_, dw);
      dw_cast_ = Tensor();  // back to the pool for the next layer's: one filter's, not each
    }
    if (!s_.bias) return;
    RT_CHECK(dbias != nullptr, "conv backward_weights: the layer has a bias but no dbias");
    if (!krsc_) {
      CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.cudnn(), &kOne, p.y_desc.get(), dy.raw(),
                                               &kZero, bias_desc_.get(), dbias->raw()));
      return;
    }
    // NHWC dy is a row-major [N*H*W, C] matrix: its column sums are dbias.
    column_sums(ctx_, dy, dy.numel() / s_.out_channels, s_.out_channels, *dbias, sum_scratch_);
  }

  // The filter's copy in the product's form (what autograd keeps for a 16-bit convolution's
  // backward too) and the inputs' conversions.
  void release_saved() override {
    x_cast_ = dy_cast_ = w_cast_ = bias_cast_ = sum_scratch_ = Tensor();
    cast_of_ = nullptr;
  }

 private:
  struct Plan {
    Shape x_shape, y_shape;
    TensorDesc x_desc, y_desc;
    Choice fwd, bwd_data, bwd_filter;
  };

  // The weights as the product reads them: w itself beside NCHW fp32, else converted to KRSC
  // in the activation type.
  const Tensor& weights(const Tensor& w) {
    if (!krsc_) return w;
    ctx_.ensure_as(w_cast_, w.shape(), act_, true);
    ctx_.convert(w, w_cast_);
    cast_of_ = w.raw();
    return w_cast_;
  }

  // The residual y holds on entry, in the activation form, kept in residual_ (y's own memory
  // where it has that form already, so nothing is copied); y is left empty. The last call's
  // residual is let go first: its memory may hold another of the caller's values by now, so
  // a conversion must not write there.
  const Tensor& take_residual(Tensor& y, const Plan& p) {
    check_shape(y, p.y_shape, "conv forward", "the residual in y");
    residual_ = Tensor();
    const Tensor& z = ctx_.as_act(y, residual_);
    if (&z == &y) residual_ = y;
    y = Tensor();
    return residual_;
  }

  // The fused kernel; false (and never again for this layer) where cuDNN has none for its
  // types or layouts, which the caller then runs op by op.
  bool run_fused(const Plan& p, const Tensor& x, const Tensor& wa, void* ws, const Tensor* z,
                 const Tensor& b, Tensor& y) {
    const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
        ctx_.cudnn(), &kOne, p.x_desc.get(), x.raw(), w_desc_.get(), wa.raw(), conv_desc_.get(),
        cudnnConvolutionFwdAlgo_t(p.fwd.algo), ws, p.fwd.memory, z ? &kOne : &kZero, p.y_desc.get(),
        z ? z->raw() : y.raw(), bias_desc_.get(), b.raw(), relu_desc_.get(), p.y_desc.get(),
        y.raw());
    if (status == CUDNN_STATUS_SUCCESS) return true;
    RT_CHECK(cudnn_unsupported(status), "conv forward (cudnnConvolutionBiasActivationForward",
             " for input ", shape_str(p.x_shape), "): ", cudnnGetErrorString(status));
    return fusable_ = false;
  }

  // The choice's math type on the descriptor, and its workspace, held by the caller until
  // the call is queued.
  std::shared_ptr<void> use(const Choice& c) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), c.math));
    return ctx_.workspace(c.memory);
  }

  Plan& plan_for(const Tensor& x, const Tensor& w) {
    for (auto& p : plans_)
      if (p->x_shape == x.shape()) return *(current_ = p.get());
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.in_channels, "conv: input ", shape_str(x.shape()),
             " does not have ", s_.in_channels, " channels");
    auto p = std::make_unique<Plan>();
    p->x_shape = x.shape();
    for (size_t i : {0, 2, 3}) as_int(x.dim(i), "dimension");  // cuDNN takes int sizes
    describe(p->x_desc, x);
    int n = 0, c = 0, h = 0, w_ = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), p->x_desc.get(),
                                                      w_desc_.get(), &n, &c, &h, &w_));
    RT_CHECK(h >= 1 && w_ >= 1, "conv: input ", shape_str(x.shape()), " smaller than the kernel");
    p->y_shape = {n, c, h, w_};
    set_4d(p->y_desc, is_nhwc(x) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_type(act_), n, c, h,
           w_);
    find_algorithms(*p, x, w);
    plans_.push_back(std::move(p));
    return *(current_ = plans_.back().get());
  }

  // Measured: runs every algorithm of each direction on this shape (cuDNN times them) and
  // keeps the fastest allowed one. Under train.deterministic the choice must not rest on a
  // timing: two deterministic algorithms each repeat their own bits but differ from each
  // other, and which is faster flips between runs (seen on an H200: dw differed in the third
  // of three fresh ops). Then cuDNN's heuristic order, the same for the same shape, device
  // and library, ranks them, and the first deterministic one that fits is kept.
  // Outputs go to scratch tensors, never to a tensor someone reads (dw may be a view into a
  // fusion bucket); the backward trials read forward's output as dy.
  void find_algorithms(Plan& p, const Tensor& x, const Tensor& w) {
    cudnnHandle_t h = ctx_.cudnn();
    const std::string input = " for input " + shape_str(p.x_shape);
    const bool ranked = ctx_.deterministic();
    Tensor y, dx, dw;
    ctx_.ensure_act(y, p.y_shape);
    ctx_.ensure_act(dx, p.x_shape);
    ctx_.ensure_as(dw, w.shape(), w.dtype(), is_nhwc(w));
    // The trials' workspace is the whole limit, but only for the search: back to the pool
    // after it, so the steps take only what the chosen algorithms use.
    const size_t ws_bytes = ranked ? 0 : ctx_.workspace_limit();
    std::shared_ptr<void> trial_ws = ws_bytes > 0 ? ctx_.pool().allocate(ws_bytes) : nullptr;
    void* ws = trial_ws.get();
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), ctx_.conv_math()));
    int max = 0, got = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(static_cast<size_t>(max));
    if (ranked)
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x_desc.get(), w_desc_.get(),
                                                         conv_desc_.get(), p.y_desc.get(), max,
                                                         &got, fwd.data()));
    else
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          h, p.x_desc.get(), x.raw(), w_desc_.get(), w.raw(), conv_desc_.get(), p.y_desc.get(),
          y.raw(), max, &got, fwd.data(), ws, ws_bytes));
    p.fwd = choose(fwd, got, ranked, ctx_, "forward algorithm" + input);
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(static_cast<size_t>(max));
    if (ranked)
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc_.get(), p.y_desc.get(),
                                                              conv_desc_.get(), p.x_desc.get(), max,
                                                              &got, data.data()));
    else
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h, w_desc_.get(), w.raw(), p.y_desc.get(), y.raw(), conv_desc_.get(), p.x_desc.get(),
          dx.raw(), max, &got, data.data(), ws, ws_bytes));
    p.bwd_data = choose(data, got, ranked, ctx_, "backward-data algorithm" + input);
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(static_cast<size_t>(max));
    if (ranked)
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x_desc.get(), p.y_desc.get(),
                                                                conv_desc_.get(), w_desc_.get(),
                                                                max, &got, filter.data()));
    else
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, p.x_desc.get(), x.raw(), p.y_desc.get(), y.raw(), conv_desc_.get(), w_desc_.get(),
          dw.raw(), max, &got, filter.data(), ws, ws_bytes));
    p.bwd_filter = choose(filter, got, ranked, ctx_, "backward-filter algorithm" + input);
  }

  Plan& current(const char* op, const Tensor& dy) {
    RT_CHECK(current_ != nullptr, op, " before forward");
    check_shape(dy, current_->y_shape, op, "dy");
    return *current_;
  }

  Context& ctx_;
  ConvSpec s_;
  DType act_;
  bool krsc_;  // NHWC activations, KRSC filters
  FilterDesc w_desc_;
  ConvDesc conv_desc_;
  TensorDesc bias_desc_;
  ActivationDesc relu_desc_;
  bool fusable_ = fusion_allowed("RINGTRAIN_CUDA_CONV_RELU");  // conv + bias + ReLU in one kernel
  bool counted_ = false;                                       // in Context::conv_relu_count
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* current_ = nullptr;
  Tensor x_cast_, dy_cast_, w_cast_, dw_cast_, bias_cast_;  // inputs in the product's form
  const void* cast_of_ = nullptr;                           // the w whose copy w_cast_ holds
  Tensor sum_scratch_;                                      // the bias sums' partials
  Tensor residual_;                                         // accumulate: the last z
};

cudaDataType_t cuda_type(DType dtype) {
  return dtype == DType::kBF16 ? CUDA_R_16BF : dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// Row-major [N, F] x [out, F]^T with a column-major BLAS: a row-major matrix is its own
// transpose in column-major order, so
//   y^T  [out, N] = w^T' x^T:   gemm(T, N, m=out, n=N, k=F,   A=w  (ld F), B=x  (ld F))
//   dx^T [F, N]   = w^T dy^T:   gemm(N, N, m=F,   n=N, k=out, A=w  (ld F), B=dy (ld out))
//   dw^T [F, out] = x^T dy:     gemm(N, T, m=F,   n=out, k=N, A=x  (ld F), B=dy (ld out))
// All through cublasGemmEx with fp32 accumulation: A and B in the activation type (16-bit
// on tensor cores), C in its own (dw is always fp32); tf32 asks for CUBLAS_COMPUTE_32F_FAST_TF32.
// Inputs are plain in NCHW order (a 16-bit NHWC activation is reordered first), so the
// flattening is the one Linear defines.
class Linear : public LinearOp {
 public:
  Linear(Context& ctx, const LinearSpec& spec) : ctx_(ctx), s_(spec), act_(ctx.act_dtype()) {}

  void forward(const Tensor& x_in, const Tensor& w, const Tensor* bias, Tensor& y) override {
    ctx_.activate();
    expect_present(x_in, "linear x");
    expect_f32(w, "linear w");
    RT_CHECK(x_in.rank() >= 2 && x_in.numel() / std::max<int64_t>(1, x_in.dim(0)) == s_.in_features,
             "linear: input ", shape_str(x_in.shape()), " does not have ", s_.in_features,
             " features per image");
    x_shape_ = x_in.shape();
    const Tensor& x = ctx_.as(x_in, act_, false, x_cast_);
    const Tensor& wa = ctx_.as(w, act_, false, w_cast_);
    const int n = as_int(x.dim(0), "batch"), f = as_int(s_.in_features, "features");
    const int out = s_.out_features;
    ctx_.ensure_as(y, {n, out}, act_, false);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out, n, f, wa, f, x, f, y, out);
    if (!s_.bias) return;
    RT_CHECK(bias != nullptr, "linear forward: the layer has a bias but none was passed");
    kernels::add_row_bias_typed(y.raw(), elem_of(act_), bias->f32(), n, out, ctx_.stream());
  }

  void backward_data(const Tensor& dy_in, const Tensor& w, Tensor& dx) override {
    ctx_.activate();
    check_dy("linear backward_data", dy_in);
    const int n = int(x_shape_[0]), f = int(s_.in_features), out = s_.out_features;
    const Tensor& dy = ctx_.as(dy_in, act_, false, dy_cast_);
    const Tensor& wa = ctx_.as(w, act_, false, w_cast_);
    ctx_.ensure_as(dx, x_shape_, act_, false);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, f, n, out, wa, f, dy, out, dx, f);
  }

  void backward_weights(const Tensor& x_in, const Tensor& dy_in, Tensor& dw,
                        Tensor* dbias) override {
    ctx_.activate();
    check_dy("linear backward_weights", dy_in);
    check_shape(dw, {s_.out_features, s_.in_features}, "linear backward_weights", "dw");
    expect_f32(dw, "linear dw");
    const int n = int(x_shape_[0]), f = int(s_.in_features), out = s_.out_features;
    const Tensor& x = ctx_.as(x_in, act_, false, x_cast_);
    const Tensor& dy = ctx_.as(dy_in, act_, false, dy_cast_);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, f, out, n, x, f, dy, out, dw, f);
    if (!s_.bias) return;
    RT_CHECK(dbias != nullptr, "linear backward_weights: the layer has a bias but no dbias");
    column_sums(ctx_, dy, n, out, *dbias, sum_scratch_);
  }

  void release_saved() override { x_cast_ = dy_cast_ = w_cast_ = sum_scratch_ = Tensor(); }

 private:
  // C = op(A) op(B) in column-major terms; C's type is its own.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const Tensor& a,
            int lda, const Tensor& b, int ldb, Tensor& c, int ldc) {
    const cublasComputeType_t compute =
        ctx_.precision() == Precision::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmEx(ctx_.cublas(), ta, tb, m, n, k, &kOne, a.raw(), cuda_type(a.dtype()),
                              lda, b.raw(), cuda_type(b.dtype()), ldb, &kZero, c.raw(),
                              cuda_type(c.dtype()), ldc, compute, CUBLAS_GEMM_DEFAULT));
  }

  void check_dy(const char* op, const Tensor& dy) {
    RT_CHECK(!x_shape_.empty(), op, " before forward");
    check_shape(dy, {x_shape_[0], s_.out_features}, op, "dy");
  }

  Context& ctx_;
  LinearSpec s_;
  DType act_;
  Shape x_shape_;
  Tensor x_cast_, dy_cast_, w_cast_;
  Tensor sum_scratch_;  // the bias sums' partials
};

}  // namespace

std::unique_ptr<ConvOp> make_conv(Context& ctx, const ConvSpec& spec) {
  RT_CHECK(!spec.accumulate || spec.inference,
           "cuda conv: ConvSpec::accumulate is for inference (forward only)");
  return std::make_unique<Conv>(ctx, spec);
}
std::unique_ptr<LinearOp> make_linear(Context& ctx, const LinearSpec& spec) {
  return std::make_unique<Linear>(ctx, spec);
}

}  // namespace ringtrain::backend::cuda
