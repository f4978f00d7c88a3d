// cuda_runtime.hpp — what code outside backend/ may use of the CUDA backend: CUDA_CHECK, an
// owned stream, and the kernels that divide and convert device buffers (staging, NCCL).
//
// Include only where RINGTRAIN_HAS_CUDA is 1. cuDNN and cuBLAS stay private to backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

namespace ringtrain::backend::cuda {

// Throws ringtrain::Error: "<lib> call <call> failed on rank R (host H) at file:line: <text>"
// followed by "  hint: ..." when the error has a known cause.
[[noreturn]] void throw_gpu_error(const char* library, const char* text, const char* hint,
                                  const char* call, const char* file, int line);
const char* cuda_hint(cudaError_t code);

// Owns one non-blocking stream (it does not synchronise with the legacy default stream).
// The destructor never throws: a failure while tearing down is ignored.
class Stream {
 public:
  Stream();
  Stream(Stream&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(s_, other.s_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace ringtrain::backend::cuda

namespace ringtrain::backend::cuda::kernels {

// t[i] /= divisor (IEEE division: nvcc's default -prec-div=true).
void divide(float* t, int64_t n, float divisor, cudaStream_t s);
// Precision conversion, round to nearest even; 16-bit values travel as their bit patterns.
void f32_to_bf16(const float* in, uint16_t* out, int64_t n, cudaStream_t s);
void bf16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t s);
void f32_to_f16(const float* in, uint16_t* out, int64_t n, cudaStream_t s);
void f16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t s);

}  // namespace ringtrain::backend::cuda::kernels

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t rt_cuda_code_ = (call);                                               \
    if (rt_cuda_code_ != cudaSuccess)                                                       \
      ::ringtrain::backend::cuda::throw_gpu_error(                                          \
          "CUDA", cudaGetErrorString(rt_cuda_code_),                                        \
          ::ringtrain::backend::cuda::cuda_hint(rt_cuda_code_), #call, __FILE__, __LINE__); \
  } while (0)
