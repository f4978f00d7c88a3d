// conv_linear.cpp — cuDNN convolution and cuBLAS linear layers: forward, backward data,
// backward weights. Convolution algorithms are chosen once per input shape by cuDNN's
// heuristics (Get*_v7), within the workspace limit, preferring deterministic ones.
#include <limits>
#include <vector>

#include "context.hpp"
#include "kernels.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

const float kOne = 1.0f, kZero = 0.0f;

void check_shape(const Tensor& t, const Shape& want, const char* op, const char* what) {
  RT_CHECK(t.shape() == want, op, ": ", what, " has shape ", shape_str(t.shape()), ", expected ",
           shape_str(want));
}

int as_int(int64_t v, const char* what) {
  RT_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuda backend: ", what, " ", v,
           " exceeds the int range of cuDNN/cuBLAS");
  return int(v);
}

// The first algorithm of a heuristics list that succeeded and fits the workspace limit,
// a deterministic one if any does.
template <typename Perf>
Perf pick(const std::vector<Perf>& perf, int returned, size_t limit, const char* which,
          const Shape& x_shape) {
  const Perf* fallback = nullptr;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > limit) continue;
    if (p.determinism == CUDNN_DETERMINISTIC) return p;
    if (fallback == nullptr) fallback = &p;
  }
  RT_CHECK(fallback != nullptr, "cuDNN has no ", which, " algorithm for input ", shape_str(x_shape),
           " within the workspace limit of ", limit >> 20,
           " MiB; raise the cuDNN workspace limit in the deck");
  return *fallback;
}

class Conv : public ConvOp {
 public:
  Conv(Context& ctx, const ConvSpec& spec) : ctx_(ctx), s_(spec) {
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                           s_.out_channels, s_.in_channels, s_.kernel, s_.kernel));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_.get(), s_.padding, s_.padding, s_.stride,
                                                s_.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), ctx_.precision() == Precision::kTF32
                                                                  ? CUDNN_DEFAULT_MATH
                                                                  : CUDNN_FMA_MATH));
    set_nchw(bias_desc_, 1, s_.out_channels, 1, 1);
    CUDNN_CHECK(cudnnSetActivationDescriptor(relu_desc_.get(), CUDNN_ACTIVATION_RELU,
                                             CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    ctx_.activate();
    expect_f32(x, "conv x");
    expect_f32(w, "conv w");
    Plan& p = plan_for(x);
    ctx_.ensure(y, p.y_shape);
    void* ws = ctx_.workspace(p.fwd.memory);
    CUDNN_CHECK(cudnnConvolutionForward(ctx_.cudnn(), &kOne, p.x_desc.get(), x.raw(), w_desc_.get(),
                                        w.raw(), conv_desc_.get(), p.fwd.algo, ws, p.fwd.memory,
                                        &kZero, p.y_desc.get(), y.raw()));
    if (s_.bias) {
      RT_CHECK(bias != nullptr, "conv forward: the layer has a bias but none was passed");
      CUDNN_CHECK(cudnnAddTensor(ctx_.cudnn(), &kOne, bias_desc_.get(), bias->raw(), &kOne,
                                 p.y_desc.get(), y.raw()));
    }
    if (s_.fuse_relu)
      CUDNN_CHECK(cudnnActivationForward(ctx_.cudnn(), relu_desc_.get(), &kOne, p.y_desc.get(),
                                         y.raw(), &kZero, p.y_desc.get(), y.raw()));
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    ctx_.activate();
    Plan& p = current("conv backward_data", dy);
    ctx_.ensure(dx, p.x_shape);
    void* ws = ctx_.workspace(p.bwd_data.memory);
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        ctx_.cudnn(), &kOne, w_desc_.get(), w.raw(), p.y_desc.get(), dy.raw(), conv_desc_.get(),
        p.bwd_data.algo, ws, p.bwd_data.memory, &kZero, p.x_desc.get(), dx.raw()));
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    ctx_.activate();
    Plan& p = current("conv backward_weights", dy);
    check_shape(dw, {s_.out_channels, s_.in_channels, s_.kernel, s_.kernel},
                "conv backward_weights", "dw");
    void* ws = ctx_.workspace(p.bwd_filter.memory);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        ctx_.cudnn(), &kOne, p.x_desc.get(), x.raw(), p.y_desc.get(), dy.raw(), conv_desc_.get(),
        p.bwd_filter.algo, ws, p.bwd_filter.memory, &kZero, w_desc_.get(), dw.raw()));
    if (!s_.bias) return;
    RT_CHECK(dbias != nullptr, "conv backward_weights: the layer has a bias but no dbias");
    CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.cudnn(), &kOne, p.y_desc.get(), dy.raw(), &kZero,
                                             bias_desc_.get(), dbias->raw()));
  }

 private:
  struct Plan {
    Shape x_shape, y_shape;
    TensorDesc x_desc, y_desc;
    cudnnConvolutionFwdAlgoPerf_t fwd;
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data;
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter;
  };

  Plan& plan_for(const Tensor& x) {
    for (auto& p : plans_)
      if (p->x_shape == x.shape()) return *(current_ = p.get());
    RT_CHECK(x.rank() == 4 && x.dim(1) == s_.in_channels, "conv: input ", shape_str(x.shape()),
             " does not have ", s_.in_channels, " channels");
    auto p = std::make_unique<Plan>();
    p->x_shape = x.shape();
    set_nchw(p->x_desc, as_int(x.dim(0), "batch"), s_.in_channels, as_int(x.dim(2), "height"),
             as_int(x.dim(3), "width"));
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), p->x_desc.get(),
                                                      w_desc_.get(), &n, &c, &h, &w));
    RT_CHECK(h >= 1 && w >= 1, "conv: input ", shape_str(x.shape()), " smaller than the kernel");
    p->y_shape = {n, c, h, w};
    set_nchw(p->y_desc, n, c, h, w);
    choose_algorithms(*p);
    plans_.push_back(std::move(p));
    return *(current_ = plans_.back().get());
  }

  void choose_algorithms(Plan& p) {
    cudnnHandle_t h = ctx_.cudnn();
    const size_t limit = ctx_.workspace_limit();
    int max = 0, got = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(max);
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, p.x_desc.get(), w_desc_.get(), conv_desc_.get(), p.y_desc.get(), max, &got, fwd.data()));
    p.fwd = pick(fwd, got, limit, "forward", p.x_shape);
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(max);
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc_.get(), p.y_desc.get(),
                                                            conv_desc_.get(), p.x_desc.get(), max,
                                                            &got, data.data()));
    p.bwd_data = pick(data, got, limit, "backward-data", p.x_shape);
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(max);
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x_desc.get(), p.y_desc.get(),
                                                              conv_desc_.get(), w_desc_.get(), max,
                                                              &got, filter.data()));
    p.bwd_filter = pick(filter, got, limit, "backward-filter", p.x_shape);
    // The heuristics' memory is an estimate: size the workspace by cuDNN's exact answer.
    CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, p.x_desc.get(), w_desc_.get(),
                                                        conv_desc_.get(), p.y_desc.get(),
                                                        p.fwd.algo, &p.fwd.memory));
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_desc_.get(), p.y_desc.get(),
                                                             conv_desc_.get(), p.x_desc.get(),
                                                             p.bwd_data.algo, &p.bwd_data.memory));
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, p.x_desc.get(), p.y_desc.get(), conv_desc_.get(), w_desc_.get(), p.bwd_filter.algo,
        &p.bwd_filter.memory));
  }

  Plan& current(const char* op, const Tensor& dy) {
    RT_CHECK(current_ != nullptr, op, " before forward");
    check_shape(dy, current_->y_shape, op, "dy");
    return *current_;
  }

  Context& ctx_;
  ConvSpec s_;
  FilterDesc w_desc_;
  ConvDesc conv_desc_;
  TensorDesc bias_desc_;
  ActivationDesc relu_desc_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* current_ = nullptr;
};

// Row-major [N, F] x [out, F]^T with a column-major BLAS: a row-major matrix is its own
// transpose in column-major order, so
//   y^T  [out, N] = w^T' x^T:   gemm(T, N, m=out, n=N, k=F,   A=w  (ld F), B=x  (ld F))
//   dx^T [F, N]   = w^T dy^T:   gemm(N, N, m=F,   n=N, k=out, A=w  (ld F), B=dy (ld out))
//   dw^T [F, out] = x^T dy:     gemm(N, T, m=F,   n=out, k=N, A=x  (ld F), B=dy (ld out))
class Linear : public LinearOp {
 public:
  Linear(Context& ctx, const LinearSpec& spec) : ctx_(ctx), s_(spec) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    ctx_.activate();
    expect_f32(x, "linear x");
    expect_f32(w, "linear w");
    RT_CHECK(x.rank() >= 2 && x.numel() / std::max<int64_t>(1, x.dim(0)) == s_.in_features,
             "linear: input ", shape_str(x.shape()), " does not have ", s_.in_features,
             " features per image");
    x_shape_ = x.shape();
    const int n = as_int(x.dim(0), "batch"), f = as_int(s_.in_features, "features");
    const int out = s_.out_features;
    ctx_.ensure(y, {n, out});
    CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, f, &kOne, w.f32(), f,
                             x.f32(), f, &kZero, y.f32(), out));
    if (!s_.bias) return;
    RT_CHECK(bias != nullptr, "linear forward: the layer has a bias but none was passed");
    kernels::add_row_bias(y.f32(), bias->f32(), n, out, ctx_.stream());
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    ctx_.activate();
    check_dy("linear backward_data", dy);
    const int n = int(x_shape_[0]), f = int(s_.in_features), out = s_.out_features;
    ctx_.ensure(dx, x_shape_);
    CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, f, n, out, &kOne, w.f32(), f,
                             dy.f32(), out, &kZero, dx.f32(), f));
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) override {
    ctx_.activate();
    check_dy("linear backward_weights", dy);
    check_shape(dw, {s_.out_features, s_.in_features}, "linear backward_weights", "dw");
    const int n = int(x_shape_[0]), f = int(s_.in_features), out = s_.out_features;
    CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, f, out, n, &kOne, x.f32(), f,
                             dy.f32(), out, &kZero, dw.f32(), f));
    if (!s_.bias) return;
    RT_CHECK(dbias != nullptr, "linear backward_weights: the layer has a bias but no dbias");
    kernels::column_sums(dy.f32(), n, out, dbias->f32(), ctx_.stream());
  }

 private:
  void check_dy(const char* op, const Tensor& dy) {
    RT_CHECK(!x_shape_.empty(), op, " before forward");
    check_shape(dy, {x_shape_[0], s_.out_features}, op, "dy");
  }

  Context& ctx_;
  LinearSpec s_;
  Shape x_shape_;
};

}  // namespace

std::unique_ptr<ConvOp> make_conv(Context& ctx, const ConvSpec& spec) {
  return std::make_unique<Conv>(ctx, spec);
}
std::unique_ptr<LinearOp> make_linear(Context& ctx, const LinearSpec& spec) {
  return std::make_unique<Linear>(ctx, spec);
}

}  // namespace ringtrain::backend::cuda
