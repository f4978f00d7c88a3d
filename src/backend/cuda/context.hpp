// context.hpp — what every CUDA op shares: the device, the compute stream, the cuDNN and
// cuBLAS handles bound to it, the memory pool and one growing cuDNN workspace.
#pragma once

#include <memory>

#include "handles.hpp"
#include "memory_pool.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"

namespace ringtrain::backend::cuda {

class Context {
 public:
  explicit Context(const CudaOptions& options);
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
  size_t workspace_limit() const { return workspace_limit_; }
  Precision precision() const { return precision_; }
  bool deterministic() const { return deterministic_; }

  // A plain device tensor from the pool.
  Tensor alloc(const Shape& shape, DType dtype = DType::kF32) const;
  // Reallocates t (plain fp32) unless it already has this shape; a view cannot change.
  void ensure(Tensor& t, const Shape& shape) const;
  // At least `bytes` of cuDNN workspace (null when bytes is 0), valid until the next call.
  void* workspace(size_t bytes);

 private:
  int device_;
  // Declared before the handles: the stream outlives what is bound to it.
  Stream stream_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  std::shared_ptr<DevicePool> pool_;
  size_t workspace_limit_;
  Precision precision_;
  bool deterministic_;
  std::shared_ptr<void> workspace_;
  size_t workspace_bytes_ = 0;
};

// Checks a tensor handed to a CUDA op: present, plain fp32.
void expect_f32(const Tensor& t, const char* what);

std::unique_ptr<ConvOp> make_conv(Context& ctx, const ConvSpec& spec);
std::unique_ptr<LinearOp> make_linear(Context& ctx, const LinearSpec& spec);
std::unique_ptr<BatchNormOp> make_batch_norm(Context& ctx, const BatchNormSpec& spec);
std::unique_ptr<ReluOp> make_relu(Context& ctx);
std::unique_ptr<PoolOp> make_pool(Context& ctx, const PoolSpec& spec);
std::unique_ptr<AddOp> make_add(Context& ctx, bool fuse_relu);

}  // namespace ringtrain::backend::cuda
