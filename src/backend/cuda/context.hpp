// context.hpp — what every CUDA op shares: the device, the compute stream, the cuDNN and
// cuBLAS handles bound to it, the memory pool, the cuDNN workspace; and the forms
// activations take (element type and order) with the conversions between them.
//
// Mixed precision (train.precision = bf16 | fp16): activations are 16-bit, 4-D ones in NHWC
// order (channels last, what tensor-core convolutions read without a transpose), marked
// with an NhwcLayout; 2-D ones are plain. tf32 keeps fp32 values, channels last too: given
// NCHW, cuDNN transposed every tensor-core convolution's operands itself and batch norm had
// no persistent kernels (docs/CUDA.md). Plain fp32 stays NCHW. Parameters, gradients and everything
// the optimizer touches stay plain fp32: ops convert weights to the activation form for the product
// and write fp32 gradients. Every op accepts its inputs in any form (a plain fp32 upload, a 16-bit
// NHWC activation, an fp32 loss gradient) and converts what is not its own.
#pragma once

#include <memory>

#include "../fusion_switch.hpp"
#include "device_scope.hpp"
#include "handles.hpp"
#include "kernels.hpp"
#include "memory_pool.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"

namespace ringtrain::backend::cuda {

// The layout mark of a 4-D tensor stored NHWC (channels last).
class NhwcLayout : public Layout {};
std::shared_ptr<const Layout> nhwc_layout();
bool is_nhwc(const Tensor& t);

kernels::Elem elem_of(DType dtype);
cudnnDataType_t cudnn_type(DType dtype);
// A cuDNN descriptor of t as it lies in memory (type and order); [N, F] as [N, F, 1, 1].
void describe(const TensorDesc& d, const Tensor& t);

class Context {
 public:
  explicit Context(const CudaOptions& options);
  // Tears down on this context's device, whatever the calling thread's is, then puts that
  // one back.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  // Makes this context's device current on the calling thread (cheap when it already is):
  // every op calls it, so a backend may be used from any thread.
  void activate() const { CUDA_CHECK(cudaSetDevice(device_)); }
  cudaStream_t stream() const { return stream_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }
  DevicePool& pool() const { return *pool_; }
  size_t workspace_limit() const { return workspace_limit_; }  // bytes
  size_t workspace_limit_mib() const { return workspace_limit_ >> 20; }
  Precision precision() const { return precision_; }
  bool deterministic() const { return deterministic_; }
  // Layers whose first forward ran an op pair in one cuDNN kernel (fused) or as two
  // (separate), for Backend::op_choices: batch norms with a ReLU, a residual block's second
  // batch norm with its sum and ReLU, and convolutions with a bias and a ReLU (and an inference
  // residual).
  struct FusionCount {
    int fused = 0;
    int separate = 0;
  };
  FusionCount& bn_relu_count() { return bn_relu_count_; }
  const FusionCount& bn_relu_count() const { return bn_relu_count_; }
  FusionCount& bn_add_relu_count() { return bn_add_relu_count_; }
  const FusionCount& bn_add_relu_count() const { return bn_add_relu_count_; }
  FusionCount& conv_relu_count() { return conv_relu_count_; }
  const FusionCount& conv_relu_count() const { return conv_relu_count_; }

  // What activations are stored in: fp32 (fp32, tf32), bf16 or fp16; 4-D 16-bit ones NHWC.
  DType act_dtype() const;
  // The convolution math: FMA only for fp32 (the tests hold it to the reference), cuDNN's
  // default for tf32 (which lets fp32 convolutions run on TF32 tensor cores), tensor ops
  // for 16-bit data.
  cudnnMathType_t conv_math() const;

  // A plain device tensor from the pool.
  Tensor alloc(const Shape& shape, DType dtype = DType::kF32) const;
  // Reallocates t unless it already has this shape, type and order.
  void ensure_as(Tensor& t, const Shape& shape, DType dtype, bool nhwc) const;
  // An activation of this shape in this context's form.
  void ensure_act(Tensor& t, const Shape& shape) const {
    ensure_as(t, shape, act_dtype(), act_nhwc(shape));
  }
  bool act_nhwc(const Shape& shape) const { return shape.size() == 4 && channels_last(); }
  // Whether 4-D activations (and the filters multiplied with them) are NHWC: bf16, fp16, tf32.
  bool channels_last() const { return precision_ != Precision::kF32; }
  // dst = src in dst's type and order (equal shapes), on the stream.
  void convert(const Tensor& src, Tensor& dst) const;
  // t itself when it already has this type and order, else t converted into scratch.
  const Tensor& as(const Tensor& t, DType dtype, bool nhwc, Tensor& scratch) const;
  const Tensor& as_act(const Tensor& t, Tensor& scratch) const {
    return as(t, act_dtype(), act_nhwc(t.shape()), scratch);
  }
  // t in the form of `like` (same type and order), for a gradient meeting its activation.
  const Tensor& as_form_of(const Tensor& t, const Tensor& like, Tensor& scratch) const {
    return as(t, like.dtype(), is_nhwc(like), scratch);
  }
  const Tensor& as_plain_f32(const Tensor& t, Tensor& scratch) const {
    return as(t, DType::kF32, false, scratch);
  }
  // Reallocates t (plain fp32) unless it already has this shape; a view cannot change.
  void ensure(Tensor& t, const Shape& shape) const;
  // At least `bytes` of cuDNN workspace for one library call (null when bytes is 0): the caller
  // holds it until that call is queued. By default the block goes back to the pool when the
  // caller lets go (a later op reuses it in stream order, as PyTorch's allocator hands out
  // each call's workspace), so only the running call's workspace counts in the memory peak;
  // RINGTRAIN_CUDA_WORKSPACE=kept holds one block as large as the largest request for the
  // context's life instead, to compare the two.
  std::shared_ptr<void> workspace(size_t bytes);
  // The largest workspace one call asked for since the context was made or the last
  // reset_workspace_peak() (bytes).
  size_t workspace_peak() const { return workspace_peak_; }
  void reset_workspace_peak() { workspace_peak_ = 0; }

 private:
  // First, so destroyed last: restores the caller's device after every member below went.
  DeviceScope teardown_;
  int device_;
  // Declared before the handles: the stream outlives what is bound to it.
  Stream stream_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  std::shared_ptr<DevicePool> pool_;
  size_t workspace_limit_;
  Precision precision_;
  bool deterministic_;
  bool workspace_kept_;                   // RINGTRAIN_CUDA_WORKSPACE=kept
  std::shared_ptr<void> kept_workspace_;  // only when kept
  size_t kept_workspace_bytes_ = 0;
  size_t workspace_peak_ = 0;
  FusionCount bn_relu_count_;
  FusionCount bn_add_relu_count_;
  FusionCount conv_relu_count_;
};

// Checks a tensor handed to a CUDA op: present, plain fp32.
void expect_f32(const Tensor& t, const char* what);
// Checks a tensor handed to a CUDA op: present (any type and order).
void expect_present(const Tensor& t, const char* what);

std::unique_ptr<ConvOp> make_conv(Context& ctx, const ConvSpec& spec);
std::unique_ptr<LinearOp> make_linear(Context& ctx, const LinearSpec& spec);
std::unique_ptr<BatchNormOp> make_batch_norm(Context& ctx, const BatchNormSpec& spec);
std::unique_ptr<ReluOp> make_relu(Context& ctx);
std::unique_ptr<PoolOp> make_pool(Context& ctx, const PoolSpec& spec);
std::unique_ptr<AddOp> make_add(Context& ctx, bool fuse_relu);

}  // namespace ringtrain::backend::cuda
