// norm_pool.cpp — cuDNN batch norm (with a synchronized path on our own kernels and an
// optional fused ReLU), ReLU and pooling; the residual add on our kernel. Activations come in
// any form (context.hpp): batch norm works in the activation form (NHWC x and y where
// activations are channels last, fp32 parameters and statistics, as cuDNN takes them); ReLU,
// pooling and add keep the form of their input.
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "context.hpp"
#include "kernels.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::backend::cuda {
namespace {

const float kOne = 1.0f, kZero = 0.0f;
// The NHWC batch norm's mode and operation (the Ex API: forward_persistent, backward_persistent).
const cudnnBatchNormMode_t kPersistent = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
const cudnnBatchNormOps_t kBnOnly = CUDNN_BATCHNORM_OPS_BN;
const cudnnBatchNormOps_t kBnRelu = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
const cudnnBatchNormOps_t kBnAddRelu = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;

void download_floats(Context& ctx, const float* device, float* host, size_t n) {
  CUDA_CHECK(
      cudaMemcpyAsync(host, device, n * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

void upload_floats(Context& ctx, const float* host, float* device, size_t n) {
  CUDA_CHECK(
      cudaMemcpyAsync(device, host, n * sizeof(float), cudaMemcpyHostToDevice, ctx.stream()));
  // The host vector may change as soon as we return.
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

class BatchNorm : public BatchNormOp {
 public:
  BatchNorm(Context& ctx, const BatchNormSpec& spec) : ctx_(ctx), s_(spec) {
    RT_CHECK(s_.eps >= CUDNN_BN_MIN_EPSILON, "batch norm: eps ", s_.eps,
             " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON);
    relu_fusable_ = fusion_allowed("RINGTRAIN_CUDA_BN_RELU");
    add_fusable_ = fusion_allowed("RINGTRAIN_CUDA_BN_ADD_RELU");
    CUDNN_CHECK(cudnnSetActivationDescriptor(relu_.get(), CUDNN_ACTIVATION_RELU,
                                             CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  double forward_training(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var, const StatReducer* reducer) override {
    ctx_.activate();
    const Tensor& x = set_dims(x_in);
    ctx_.ensure(mean, {C_});
    ctx_.ensure(var, {C_});
    ctx_.ensure_act(y, x.shape());
    cudnn_saved_ = false;
    if (reducer && *reducer) {
      global_statistics(ctx_.as_plain_f32(x, x_f32_), mean, var, *reducer);
      x_f32_ = Tensor();  // backward converts x again: not kept through the step
      normalise(x, gamma, beta, mean, var, y);
      apply_relu(y);
      return count_;
    }
    const double m = statistics_for_cudnn(x, mean, var);
    persistent_saved_ =
        is_nhwc(x) && persistent_usable_ && forward_persistent(x, gamma, beta, y, mean, var);
    if (!persistent_saved_)
      CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_desc_.get(), x.raw(),
          x_desc_.get(), y.raw(), param_desc_.get(), gamma.raw(), beta.raw(), 1.0, mean.raw(),
          var.raw(), s_.eps, saved_mean_.raw(), saved_inv_var_.raw()));
    statistics_from_cudnn(x, m, var);
    if (persistent_saved_ && relu_fused_) {
      relu_y_ = y;   // cuDNN applied the ReLU; backward reads y as its mask
      beta_ = beta;  // ... and beta (the optimizer changes it only after backward)
    } else {
      apply_relu(y);
    }
    count_ = m;
    return m;
  }

  // relu(bn(x) + residual) in one of cuDNN's NHWC kernels (BN_ADD_ACTIVATION), the block's
  // separate add and its pass over memory gone. Declines (0) where the batch norm is
  // synchronized or has its own ReLU, x is not NHWC, or cuDNN has no such kernel for the layer
  // (then never again for it). Backward takes the sum's gradient masked by the ReLU, as after
  // forward_training; cuDNN's backward of this forward masks it by y once more, which changes
  // nothing, and writes the residual's gradient, which the block has already.
  double forward_training_add_relu(const Tensor& x_in, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& residual, Tensor& y, Tensor& mean, Tensor& var,
                                   const StatReducer* reducer) override {
    if ((reducer && *reducer) || s_.fuse_relu || !add_fusable_) return 0;
    ctx_.activate();
    const Tensor& x = set_dims(x_in);
    if (!is_nhwc(x) || !persistent_usable_) return declined_add();
    RT_CHECK(residual.shape() == x.shape(), "batch norm + residual: residual ",
             shape_str(residual.shape()), " differs from x ", shape_str(x.shape()));
    const Tensor& z = ctx_.as_form_of(residual, x, z_cast_);
    ctx_.ensure(mean, {C_});
    ctx_.ensure(var, {C_});
    ctx_.ensure_act(y, x.shape());
    const double m = statistics_for_cudnn(x, mean, var);
    relu_fused_ = add_fused_ = true;
    const cudnnStatus_t status = run_forward_persistent(x, gamma, beta, y, mean, var, &z);
    z_cast_ = Tensor();
    if (status != CUDNN_STATUS_SUCCESS) {
      RT_CHECK(cudnn_unsupported(status), "cudnnBatchNormalizationForwardTrainingEx (batch norm ",
               "+ residual + ReLU, ", shape_str(x.shape()), "): ", cudnnGetErrorString(status));
      relu_fused_ = add_fused_ = add_fusable_ = false;
      return declined_add();
    }
    if (!add_counted_) ctx_.bn_add_relu_count().fused += 1;
    add_counted_ = true;
    persistent_saved_ = true;
    statistics_from_cudnn(x, m, var);
    relu_y_ = y;   // backward's ReLU mask
    beta_ = beta;  // ... and what it rebuilds the values before it from
    count_ = m;
    return m;
  }

  void forward_inference(const Tensor& x_in, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    ctx_.activate();
    const Tensor& x = set_dims(x_in);
    ctx_.ensure_act(y, x.shape());
    normalise(x, gamma, beta, mean, var, y);
    apply_relu(y);
  }

  void backward(const Tensor& x_in, const Tensor& dy_in, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const StatReducer* reducer) override {
    backward_through(x_in, dy_in, gamma, mean, var, dx, dgamma, dbeta, reducer);
    // Backward's scratch goes back to the pool (the next op on the stream may take it): kept,
    // each would be one more activation-sized block per layer for the whole step.
    dy_bn_ = Tensor();
    dy_cast_ = Tensor();
    dz_ = Tensor();
    x_f32_ = Tensor();
    dy_f32_ = Tensor();
    dx_f32_ = Tensor();
  }

  // The forward's output kept as the ReLU's mask, cuDNN's reserve space and the input's
  // conversion; cuDNN's cache of this forward goes with them.
  void release_saved() override {
    relu_y_ = beta_ = reserve_ = x_cast_ = z_cast_ = dz_ = Tensor();
    reserve_bytes_ = 0;
    cudnn_saved_ = persistent_saved_ = false;
  }

 private:
  void backward_through(const Tensor& x_in, const Tensor& dy_in, const Tensor& gamma,
                        const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta, const StatReducer* reducer) {
    ctx_.activate();
    const Tensor& x = set_dims(x_in);
    RT_CHECK(dy_in.shape() == x.shape(), "batch norm backward: dy ", shape_str(dy_in.shape()),
             " differs from x ", shape_str(x.shape()));
    const Tensor& dy = ctx_.as_form_of(dy_in, x, dy_cast_);
    ctx_.ensure_act(dx, x.shape());
    // cuDNN's cache from the training forward of this x, else null (cuDNN recomputes the
    // statistics from x: the same batch statistics `mean` and `var` hold).
    const bool cached = cudnn_saved_ && x.shape() == saved_shape_;
    if (cached && persistent_saved_ && relu_fused_) {
      backward_persistent(x, dy, gamma, dx, dgamma, dbeta);  // the ReLU's mask included
      return;
    }
    const Tensor& dy_bn = through_relu(dy);
    if (reducer && *reducer) {
      ctx_.ensure(inv_std_, {C_});
      kernels::inv_std(var.f32(), s_.eps, C_, inv_std_.f32(), ctx_.stream());
      sync_backward(x, dy_bn, gamma, mean, dx, dgamma, dbeta, *reducer);
      return;
    }
    if (cached && persistent_saved_) {
      backward_persistent(x, dy_bn, gamma, dx, dgamma, dbeta);
      return;
    }
    CUDNN_CHECK(cudnnBatchNormalizationBackward(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, x_desc_.get(), x.raw(),
        x_desc_.get(), dy_bn.raw(), x_desc_.get(), dx.raw(), param_desc_.get(), gamma.raw(),
        dgamma.raw(), dbeta.raw(), s_.eps, cached ? saved_mean_.raw() : nullptr,
        cached ? saved_inv_var_.raw() : nullptr));
  }

  // x in the activation form (converted when it is not), its sizes and descriptors.
  const Tensor& set_dims(const Tensor& x_in) {
    expect_present(x_in, "batch norm x");
    RT_CHECK(x_in.rank() == 4 && x_in.dim(1) == s_.channels, "batch norm: input ",
             shape_str(x_in.shape()), " does not have ", s_.channels, " channels");
    const Tensor& x = ctx_.as_act(x_in, x_cast_);
    if (x.shape() == x_shape_) return x;
    x_shape_ = x.shape();
    N_ = x.dim(0), C_ = x.dim(1), HW_ = x.dim(2) * x.dim(3);
    describe(x_desc_, x);
    // fp32 for fp32, bf16 and fp16 data alike: parameters and statistics stay fp32.
    CUDNN_CHECK(
        cudnnDeriveBNTensorDescriptor(param_desc_.get(), x_desc_.get(), CUDNN_BATCHNORM_SPATIAL));
    return x;
  }

  // Training forward through cuDNN's NHWC kernels (the Ex API, SPATIAL_PERSISTENT): the
  // plain cudnnBatchNormalizationForwardTraining on NHWC bf16 data took 2-3 ms per call
  // where a convolution took 40 us (ResNet-18, batch 256, on an H200: 95% of the step, see
  // docs/CUDA.md). PyTorch takes the same path for channels-last batch norm. The reserve
  // space it fills is backward's. With the ReLU fused, cuDNN applies it in the same kernel
  // (BN_ACTIVATION: no separate activation pass forward or backward, no masked gradient);
  // where it has no such kernel for the layer, the ReLU runs on its own as before. False
  // (and never again for this layer) where cuDNN has no persistent kernel for the shape or
  // type at all: the spatial one then runs.
  bool forward_persistent(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& mean, Tensor& var) {
    relu_fused_ = s_.fuse_relu && relu_fusable_;
    add_fused_ = false;
    cudnnStatus_t status = run_forward_persistent(x, gamma, beta, y, mean, var);
    if (relu_fused_ && cudnn_unsupported(status)) {
      relu_fusable_ = relu_fused_ = false;
      status = run_forward_persistent(x, gamma, beta, y, mean, var);
    }
    if (status == CUDNN_STATUS_SUCCESS) {
      if (s_.fuse_relu && !counted_) {
        (relu_fused_ ? ctx_.bn_relu_count().fused : ctx_.bn_relu_count().separate) += 1;
        counted_ = true;
      }
      return true;
    }
    RT_CHECK(cudnn_unsupported(status),
             "cudnnBatchNormalizationForwardTrainingEx: ", cudnnGetErrorString(status));
    persistent_usable_ = false;
    static std::once_flag said;
    std::call_once(said, [&] {
      log::warn(str("cuDNN has no persistent NHWC batch norm for ", shape_str(x.shape()), " ",
                    dtype_name(x.dtype()), " (", cudnnGetErrorString(status),
                    "): the spatial kernels run, several times slower"));
    });
    return false;
  }

  // The batch norm (and, with relu_fused_, its ReLU; with add_fused_, z added before it) of
  // forward_persistent or forward_training_add_relu, once.
  cudnnStatus_t run_forward_persistent(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       Tensor& y, Tensor& mean, Tensor& var,
                                       const Tensor* z = nullptr) {
    const cudnnBatchNormOps_t ops = persistent_ops();
    cudnnActivationDescriptor_t act = relu_fused_ ? relu_.get() : nullptr;
    cudnnTensorDescriptor_t z_desc = add_fused_ ? x_desc_.get() : nullptr;
    size_t ws_bytes = 0;
    cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        ctx_.cudnn(), kPersistent, ops, x_desc_.get(), z_desc, x_desc_.get(), param_desc_.get(),
        act, &ws_bytes);
    if (status == CUDNN_STATUS_SUCCESS)
      status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
          ctx_.cudnn(), kPersistent, ops, act, x_desc_.get(), &reserve_bytes_);
    if (status != CUDNN_STATUS_SUCCESS) return status;
    ctx_.ensure(reserve_, {int64_t(reserve_bytes_ / sizeof(float)) + 1});
    return cudnnBatchNormalizationForwardTrainingEx(
        ctx_.cudnn(), kPersistent, ops, &kOne, &kZero, x_desc_.get(), x.raw(), z_desc,
        add_fused_ ? z->raw() : nullptr, x_desc_.get(), y.raw(), param_desc_.get(), gamma.raw(),
        beta.raw(), 1.0, mean.raw(), var.raw(), s_.eps, saved_mean_.raw(), saved_inv_var_.raw(),
        act, ctx_.workspace(ws_bytes).get(), ws_bytes, reserve_.raw(), reserve_bytes_);
  }

  // Before a training forward through cuDNN: the values per channel, checked, returned. With an
  // average factor of 1 the "running" outputs are this batch's mean and its unbiased
  // variance; zeroed first because 0 * NaN in uninitialised memory is NaN. cuDNN's own saved
  // mean and inverse deviation are made: its backward reads them as an opaque cache of this
  // forward, in whatever form it wrote them.
  double statistics_for_cudnn(const Tensor& x, Tensor& mean, Tensor& var) {
    const double m = double(N_ * HW_);
    RT_CHECK(m > 1, "batch norm: training needs more than one value per channel, input ",
             shape_str(x.shape()));
    kernels::fill(mean.f32(), C_, 0.0f, ctx_.stream());
    kernels::fill(var.f32(), C_, 0.0f, ctx_.stream());
    ctx_.ensure(saved_mean_, {C_});
    ctx_.ensure(saved_inv_var_, {C_});
    return m;
  }

  // After it: cuDNN's cache is this x's, and the variance the biased one forward returns.
  void statistics_from_cudnn(const Tensor& x, double m, Tensor& var) {
    cudnn_saved_ = true;
    saved_shape_ = x.shape();
    kernels::axpby(0.0f, nullptr, float((m - 1) / m), var.f32(), C_, ctx_.stream());
  }

  // What the last persistent forward ran: the batch norm, with its ReLU, with z added first.
  cudnnBatchNormOps_t persistent_ops() const {
    return add_fused_ ? kBnAddRelu : relu_fused_ ? kBnRelu : kBnOnly;
  }

  // forward_training_add_relu's decline, counted once for op_choices.
  double declined_add() {
    if (!add_counted_) ctx_.bn_add_relu_count().separate += 1;
    add_counted_ = true;
    return 0;
  }

  // Backward of forward_persistent's forward, reading its saved statistics and reserve space.
  // With the ReLU fused there, dy is the gradient of the ReLU's output: cuDNN masks it by y,
  // the forward's output, and reads beta to rebuild the values before the ReLU. With z added,
  // cuDNN also writes z's gradient (dy masked), into scratch: the caller's dy is that already.
  void backward_persistent(const Tensor& x, const Tensor& dy, const Tensor& gamma, Tensor& dx,
                           Tensor& dgamma, Tensor& dbeta) {
    const cudnnBatchNormOps_t ops = persistent_ops();
    cudnnActivationDescriptor_t act = relu_fused_ ? relu_.get() : nullptr;
    cudnnTensorDescriptor_t y_desc = relu_fused_ ? x_desc_.get() : nullptr;
    cudnnTensorDescriptor_t dz_desc = add_fused_ ? x_desc_.get() : nullptr;
    const void* y = relu_fused_ ? relu_y_.raw() : nullptr;
    const void* beta = relu_fused_ ? beta_.raw() : nullptr;
    if (add_fused_) ctx_.ensure_act(dz_, x.shape());
    size_t ws_bytes = 0;
    CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        ctx_.cudnn(), kPersistent, ops, x_desc_.get(), y_desc, x_desc_.get(), dz_desc,
        x_desc_.get(), param_desc_.get(), act, &ws_bytes));
    CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        ctx_.cudnn(), kPersistent, ops, &kOne, &kZero, &kOne, &kZero, x_desc_.get(), x.raw(),
        y_desc, y, x_desc_.get(), dy.raw(), dz_desc, add_fused_ ? dz_.raw() : nullptr,
        x_desc_.get(), dx.raw(), param_desc_.get(), gamma.raw(), beta, dgamma.raw(), dbeta.raw(),
        s_.eps, saved_mean_.raw(), saved_inv_var_.raw(), act, ctx_.workspace(ws_bytes).get(),
        ws_bytes, reserve_.raw(), reserve_bytes_));
  }

  // y = gamma * (x - mean) / sqrt(var + eps) + beta with the given statistics.
  void normalise(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                 const Tensor& var, Tensor& y) {
    CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_desc_.get(), x.raw(), x_desc_.get(),
        y.raw(), param_desc_.get(), gamma.raw(), beta.raw(), mean.raw(), var.raw(), s_.eps));
  }

  // The fused ReLU, in place, after either forward. Its output is kept (shared storage, no
  // copy; the layer keeps it too, as the next layer's input) for backward's mask.
  void apply_relu(Tensor& y) {
    if (!s_.fuse_relu) return;
    CUDNN_CHECK(cudnnActivationForward(ctx_.cudnn(), relu_.get(), &kOne, x_desc_.get(), y.raw(),
                                       &kZero, x_desc_.get(), y.raw()));
    relu_y_ = y;
  }

  // dy of the ReLU's output -> dy of the normalisation's: zero where the last forward's
  // output was not positive (the cpu and ref backends' contract).
  const Tensor& through_relu(const Tensor& dy) {
    if (!s_.fuse_relu) return dy;
    RT_CHECK(!relu_y_.empty() && relu_y_.shape() == dy.shape(),
             "batch norm backward: no forward of shape ", shape_str(dy.shape()), " before it");
    ctx_.ensure_act(dy_bn_, dy.shape());
    CUDNN_CHECK(cudnnActivationBackward(ctx_.cudnn(), relu_.get(), &kOne, x_desc_.get(),
                                        relu_y_.raw(), x_desc_.get(), dy.raw(), x_desc_.get(),
                                        relu_y_.raw(), &kZero, x_desc_.get(), dy_bn_.raw()));
    return dy_bn_;
  }

  // Mean, then variance about it (two passes, no cancellation), summed over every rank
  // through the host-memory reducer.
  void global_statistics(const Tensor& x, Tensor& mean, Tensor& var, const StatReducer& reducer) {
    ctx_.ensure(sums_, {C_});
    host_.assign(C_ + 1, 0.0f);
    kernels::channel_sums(x.f32(), nullptr, false, N_, C_, HW_, sums_.f32(), ctx_.stream());
    download_floats(ctx_, sums_.f32(), host_.data(), C_);
    host_[C_] = float(N_ * HW_);
    reducer(host_.data(), host_.size());
    count_ = host_[C_];
    for (int64_t c = 0; c < C_; ++c) host_[c] /= float(count_);
    upload_floats(ctx_, host_.data(), mean.f32(), C_);
    kernels::channel_sums(x.f32(), mean.f32(), true, N_, C_, HW_, sums_.f32(), ctx_.stream());
    download_floats(ctx_, sums_.f32(), host_.data(), C_);
    reducer(host_.data(), C_);
    for (int64_t c = 0; c < C_; ++c) host_[c] /= float(count_);
    upload_floats(ctx_, host_.data(), var.f32(), C_);
  }

  // dgamma and dbeta are this rank's; dx uses their sums over every rank:
  //   dx = gamma*inv_std * (dy - (sum_dbeta + xhat * sum_dgamma) / M)
  // Our kernels read plain fp32: 16-bit activations are converted there and back.
  void sync_backward(const Tensor& x_act, const Tensor& dy_act, const Tensor& gamma,
                     const Tensor& mean, Tensor& dx_act, Tensor& dgamma, Tensor& dbeta,
                     const StatReducer& reducer) {
    const Tensor& x = ctx_.as_plain_f32(x_act, x_f32_);
    const Tensor& dy = ctx_.as_plain_f32(dy_act, dy_f32_);
    const bool convert_dx = dx_act.dtype() != DType::kF32 || !dx_act.is_plain();
    if (convert_dx) ctx_.ensure(dx_f32_, dx_act.shape());
    Tensor& dx = convert_dx ? dx_f32_ : dx_act;
    kernels::bn_backward_sums(x.f32(), dy.f32(), mean.f32(), inv_std_.f32(), N_, C_, HW_,
                              dgamma.f32(), dbeta.f32(), ctx_.stream());
    host_.assign(2 * C_, 0.0f);
    download_floats(ctx_, dgamma.f32(), host_.data(), C_);
    download_floats(ctx_, dbeta.f32(), host_.data() + C_, C_);
    reducer(host_.data(), host_.size());
    ctx_.ensure(sums_, {2 * C_});
    upload_floats(ctx_, host_.data(), sums_.f32(), 2 * C_);
    kernels::bn_backward_dx(x.f32(), dy.f32(), gamma.f32(), mean.f32(), inv_std_.f32(), sums_.f32(),
                            sums_.f32() + C_, float(count_), N_, C_, HW_, dx.f32(), ctx_.stream());
    if (convert_dx) ctx_.convert(dx, dx_act);
  }

  Context& ctx_;
  BatchNormSpec s_;
  Shape x_shape_;
  int64_t N_ = 0, C_ = 0, HW_ = 0;
  double count_ = 0;
  TensorDesc x_desc_, param_desc_;
  ActivationDesc relu_;
  Tensor inv_std_, sums_;
  Tensor saved_mean_, saved_inv_var_;  // cuDNN's cache from the last training forward
  bool cudnn_saved_ = false;           // ... when that forward went through cuDNN
  Shape saved_shape_;                  // ... and had this x shape
  bool persistent_saved_ = false;      // ... through forward_persistent, with reserve_
  bool persistent_usable_ = true;      // until cuDNN said it has none for this layer
  bool relu_fused_ = false;            // the last persistent forward applied the ReLU too
  bool relu_fusable_ = true;           // until cuDNN said it has no BN_ACTIVATION kernel here
  bool add_fused_ = false;             // the last forward_persistent added z (BN_ADD_ACTIVATION)
  bool add_fusable_ = true;            // until cuDNN said it has no BN_ADD_ACTIVATION kernel here
  bool add_counted_ = false;           // in Context::bn_add_relu_count
  Tensor beta_;                        // ... and the beta it read, for backward
  bool counted_ = false;               // in Context::bn_relu_count
  Tensor reserve_;                     // forward_persistent's reserve space, for backward
  size_t reserve_bytes_ = 0;
  Tensor relu_y_;                   // fused ReLU: the last forward's output
  Tensor dy_bn_;                    // fused ReLU: dy masked by relu_y_ > 0
  Tensor x_cast_, dy_cast_;         // inputs converted to the activation form
  Tensor z_cast_;                   // the residual converted to x's form
  Tensor dz_;                       // BN_ADD_ACTIVATION's backward: z's gradient, unread
  Tensor x_f32_, dy_f32_, dx_f32_;  // synchronized BN's plain fp32 copies
  std::vector<float> host_;
};

class Relu : public ReluOp {
 public:
  explicit Relu(Context& ctx) : ctx_(ctx) {
    CUDNN_CHECK(cudnnSetActivationDescriptor(relu_.get(), CUDNN_ACTIVATION_RELU,
                                             CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  // y takes x's form.
  void forward(const Tensor& x, Tensor& y) override {
    ctx_.activate();
    expect_present(x, "relu x");
    describe(desc_, x);
    ctx_.ensure_as(y, x.shape(), x.dtype(), is_nhwc(x));
    CUDNN_CHECK(cudnnActivationForward(ctx_.cudnn(), relu_.get(), &kOne, desc_.get(), x.raw(),
                                       &kZero, desc_.get(), y.raw()));
  }

  // ReLU's derivative reads its input's sign, which is y's: y stands in for x.
  void backward(const Tensor& y, const Tensor& dy_in, Tensor& dx) override {
    ctx_.activate();
    expect_present(y, "relu y");
    RT_CHECK(dy_in.shape() == y.shape(), "relu backward: dy ", shape_str(dy_in.shape()),
             " differs from y ", shape_str(y.shape()));
    const Tensor& dy = ctx_.as_form_of(dy_in, y, dy_cast_);
    describe(desc_, y);
    ctx_.ensure_as(dx, y.shape(), y.dtype(), is_nhwc(y));
    CUDNN_CHECK(cudnnActivationBackward(ctx_.cudnn(), relu_.get(), &kOne, desc_.get(), y.raw(),
                                        desc_.get(), dy.raw(), desc_.get(), y.raw(), &kZero,
                                        desc_.get(), dx.raw()));
  }

  // cuDNN's activation backward takes one dy: the sum and the mask in one kernel of ours.
  void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                       Tensor& dx) override {
    ctx_.activate();
    expect_present(y, "relu y");
    RT_CHECK(y.is_plain() || is_nhwc(y), "relu backward: y has a layout the kernel cannot read");
    RT_CHECK(dy_a.shape() == y.shape() && dy_b.shape() == y.shape(), "relu backward: dy parts ",
             shape_str(dy_a.shape()), " and ", shape_str(dy_b.shape()), " differ from y ",
             shape_str(y.shape()));
    const Tensor& a = ctx_.as_form_of(dy_a, y, dy_cast_);
    const Tensor& b = ctx_.as_form_of(dy_b, y, dy_b_cast_);
    ctx_.ensure_as(dx, y.shape(), y.dtype(), is_nhwc(y));
    kernels::relu_backward_of_sum(y.raw(), a.raw(), b.raw(), dx.raw(), elem_of(y.dtype()),
                                  y.numel(), ctx_.stream());
  }

  void release_saved() override { dy_cast_ = dy_b_cast_ = Tensor(); }

 private:
  Context& ctx_;
  ActivationDesc relu_;
  TensorDesc desc_;
  Tensor dy_cast_, dy_b_cast_;
};

class Pool : public PoolOp {
 public:
  Pool(Context& ctx, const PoolSpec& spec) : ctx_(ctx), s_(spec) {}

  // y takes x's form.
  void forward(const Tensor& x, Tensor& y, bool training) override {
    ctx_.activate();
    expect_present(x, "pool x");
    Plan& p = plan_for(x);
    ctx_.ensure_as(y, p.y_shape, x.dtype(), is_nhwc(x));
    CUDNN_CHECK(cudnnPoolingForward(ctx_.cudnn(), p.pool.get(), &kOne, p.x_desc.get(), x.raw(),
                                    &kZero, p.y_desc.get(), y.raw()));
    if (training) {
      // cuDNN's backward reads x and y again: keep them (shared storage, no copy).
      last_ = &p;
      x_ = x;
      y_ = y;
    }
  }

  void backward(const Tensor& dy_in, Tensor& dx) override {
    ctx_.activate();
    RT_CHECK(last_ != nullptr, "pool backward before a training forward");
    Plan& p = *last_;
    RT_CHECK(dy_in.shape() == p.y_shape, "pool backward: dy ", shape_str(dy_in.shape()),
             ", expected ", shape_str(p.y_shape));
    const Tensor& dy = ctx_.as_form_of(dy_in, y_, dy_cast_);
    ctx_.ensure_as(dx, p.x_shape, x_.dtype(), is_nhwc(x_));
    CUDNN_CHECK(cudnnPoolingBackward(ctx_.cudnn(), p.pool.get(), &kOne, p.y_desc.get(), y_.raw(),
                                     p.y_desc.get(), dy.raw(), p.x_desc.get(), x_.raw(), &kZero,
                                     p.x_desc.get(), dx.raw()));
  }

  // The forward's input and output, which cuDNN's backward reads.
  void release_saved() override {
    x_ = y_ = dy_cast_ = Tensor();
    last_ = nullptr;
  }

 private:
  struct Plan {
    Shape x_shape, y_shape;
    DType dtype;
    bool nhwc;
    PoolDesc pool;
    TensorDesc x_desc, y_desc;
  };

  Plan& plan_for(const Tensor& x) {
    for (auto& p : plans_)
      if (p->x_shape == x.shape() && p->dtype == x.dtype() && p->nhwc == is_nhwc(x)) return *p;
    RT_CHECK(x.rank() == 4, "pool: input ", shape_str(x.shape()), " is not 4-D");
    auto p = std::make_unique<Plan>();
    p->x_shape = x.shape();
    p->dtype = x.dtype();
    p->nhwc = is_nhwc(x);
    const int kh = s_.global ? int(x.dim(2)) : s_.kernel;
    const int kw = s_.global ? int(x.dim(3)) : s_.kernel;
    const int st = s_.global ? 1 : s_.stride, pad = s_.global ? 0 : s_.padding;
    // Average pooling counts the padding, as the reference and PyTorch's default do. Max
    // pooling's backward with CUDNN_POOLING_MAX is nondeterministic where windows overlap
    // (atomic adds): the deterministic mode, like the convolutions' deterministic algorithms,
    // keeps two runs bitwise equal. Its forward is the same maximum.
    const cudnnPoolingMode_t mode = s_.kind == PoolKind::kMax
                                        ? CUDNN_POOLING_MAX_DETERMINISTIC
                                        : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, kh, kw,
                                            pad, pad, st, st));
    describe(p->x_desc, x);
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pool.get(), p->x_desc.get(), &n, &c, &h, &w));
    RT_CHECK(h >= 1 && w >= 1, "pool: input ", shape_str(x.shape()), " smaller than the kernel");
    p->y_shape = {n, c, h, w};
    set_4d(p->y_desc, p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_type(p->dtype), n, c,
           h, w);
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  Context& ctx_;
  PoolSpec s_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* last_ = nullptr;
  Tensor x_, y_;  // the last training forward's input and output
  Tensor dy_cast_;
};

class Add : public AddOp {
 public:
  Add(Context& ctx, bool fuse_relu) : ctx_(ctx), relu_(fuse_relu) {}

  // out takes a's form; b is converted to it when it differs.
  void forward(const Tensor& a, const Tensor& b_in, Tensor& out) override {
    ctx_.activate();
    expect_present(a, "add a");
    expect_present(b_in, "add b");
    RT_CHECK(a.is_plain() || is_nhwc(a), "add: a has a layout the kernel cannot read");
    RT_CHECK(a.shape() == b_in.shape(), "add: shapes ", shape_str(a.shape()), " and ",
             shape_str(b_in.shape()), " differ");
    const Tensor& b = ctx_.as_form_of(b_in, a, b_cast_);
    ctx_.ensure_as(out, a.shape(), a.dtype(), is_nhwc(a));
    kernels::add_typed(a.raw(), b.raw(), out.raw(), elem_of(a.dtype()), a.numel(), relu_,
                       ctx_.stream());
  }

  void release_saved() override { b_cast_ = Tensor(); }

 private:
  Context& ctx_;
  bool relu_;
  Tensor b_cast_;
};

}  // namespace

std::unique_ptr<BatchNormOp> make_batch_norm(Context& ctx, const BatchNormSpec& spec) {
  return std::make_unique<BatchNorm>(ctx, spec);
}
std::unique_ptr<ReluOp> make_relu(Context& ctx) {
  return std::make_unique<Relu>(ctx);
}
std::unique_ptr<PoolOp> make_pool(Context& ctx, const PoolSpec& spec) {
  return std::make_unique<Pool>(ctx, spec);
}
std::unique_ptr<AddOp> make_add(Context& ctx, bool fuse_relu) {
  return std::make_unique<Add>(ctx, fuse_relu);
}

}  // namespace ringtrain::backend::cuda
