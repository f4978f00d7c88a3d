// handles.hpp — RAII owners of CUDA events, graphs, pinned host memory, the cuDNN and cuBLAS
// handles and cuDNN descriptors (streams are in the public backend/cuda_runtime.hpp). Destructors
// never throw.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
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

// Owns a handle a CUDA call handed out rather than one made here (a graph from stream capture,
// its executable form), released by Destroy; empty until given one.
template <auto Destroy>
struct CallDestroy {
  template <typename P>
  void operator()(P* p) const noexcept {
    (void)Destroy(p);
  }
};
template <typename T, auto Destroy>
using Adopted = std::unique_ptr<std::remove_pointer_t<T>, CallDestroy<Destroy>>;
using GraphOwner = Adopted<cudaGraph_t, cudaGraphDestroy>;
using GraphExecOwner = Adopted<cudaGraphExec_t, cudaGraphExecDestroy>;

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

inline cudaError_t create_sync_event(cudaEvent_t* e) {
  // No timing (cheaper to record); a waiting host thread sleeps instead of spinning on a
  // core the ranks' CPU work needs.
  return cudaEventCreateWithFlags(e, cudaEventDisableTiming | cudaEventBlockingSync);
}
// An event a host thread waits on (copies done, work ready).
using SyncEvent = Owned<cudaEvent_t, create_sync_event, cudaEventDestroy>;

// Page-locked host memory (cudaHostAlloc): copies from it run asynchronously and at full
// speed, where pageable memory makes cudaMemcpyAsync wait. Empty until sized.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : bytes_(bytes) {
    CUDA_CHECK(cudaHostAlloc(&p_, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(p_, other.p_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_ != nullptr) (void)cudaFreeHost(p_);
  }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A 4-D tensor descriptor in NCHW or NHWC order; n, c, h, w as the cuDNN call wants them.
inline void set_4d(const TensorDesc& d, cudnnTensorFormat_t format, cudnnDataType_t type, int n,
                   int c, int h, int w) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), format, type, n, c, h, w));
}

}  // namespace ringtrain::backend::cuda
