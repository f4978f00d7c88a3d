// handles.hpp — RAII owners of CUDA events, the cuDNN and cuBLAS handles and cuDNN descriptors
// (streams are in the public backend/cuda_runtime.hpp). Destructors never throw.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <type_traits>
#include <utility>

#include "check.hpp"

namespace ringtrain::backend::cuda {

// Owns one handle-like pointer created by Create and released by Destroy.
template <typename T, auto Create, auto Destroy>
class Owned {
 public:
  Owned() { create(); }
  Owned(Owned&& other) noexcept : h_(std::exchange(other.h_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    std::swap(h_, other.h_);
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (h_ != nullptr) (void)Destroy(h_);
  }
  T get() const { return h_; }

 private:
  void create();
  T h_ = nullptr;
};

template <typename T, auto Create, auto Destroy>
void Owned<T, Create, Destroy>::create() {
  using Status = decltype(Create(&h_));
  const Status status = Create(&h_);
  if constexpr (std::is_same_v<Status, cudnnStatus_t>) {
    CUDNN_CHECK(status);
  } else if constexpr (std::is_same_v<Status, cublasStatus_t>) {
    CUBLAS_CHECK(status);
  } else {
    CUDA_CHECK(status);
  }
}

using CudnnHandle = Owned<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using CublasHandle = Owned<cublasHandle_t, cublasCreate, cublasDestroy>;
using TensorDesc =
    Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                       cudnnDestroyConvolutionDescriptor>;
using PoolDesc =
    Owned<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDesc = Owned<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                             cudnnDestroyActivationDescriptor>;

inline cudaError_t create_timing_event(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDefault);
}
// An event that records timestamps; elapsed(start, stop) in milliseconds.
using Event = Owned<cudaEvent_t, create_timing_event, cudaEventDestroy>;

inline float elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  CUDA_CHECK(cudaEventSynchronize(stop.get()));
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

// A plain NCHW fp32 tensor descriptor; n, c, h, w as the cuDNN call wants them.
inline void set_nchw(const TensorDesc& d, int n, int c, int h, int w) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
}

}  // namespace ringtrain::backend::cuda
