// check.hpp — CUDA_CHECK, CUDNN_CHECK, CUBLAS_CHECK, NCCL_CHECK: rank, host, file:line, the
// library's own error text and a hint, thrown as ringtrain::Error (internal to the CUDA code).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace ringtrain::backend::cuda {

// Throws ringtrain::Error: "<lib> call <call> failed on rank R (host H) at file:line: <text>"
// followed by "  hint: ..." when the error has a known cause.
[[noreturn]] void throw_gpu_error(const char* library, const char* text, const char* hint,
                                  const char* call, const char* file, int line);

const char* cuda_hint(cudaError_t code);
const char* cublas_text(cublasStatus_t status);

}  // namespace ringtrain::backend::cuda

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t rt_cuda_code_ = (call);                                               \
    if (rt_cuda_code_ != cudaSuccess)                                                       \
      ::ringtrain::backend::cuda::throw_gpu_error(                                          \
          "CUDA", cudaGetErrorString(rt_cuda_code_),                                        \
          ::ringtrain::backend::cuda::cuda_hint(rt_cuda_code_), #call, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(call)                                                                         \
  do {                                                                                            \
    const cudnnStatus_t rt_cudnn_status_ = (call);                                                \
    if (rt_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                                 \
      ::ringtrain::backend::cuda::throw_gpu_error("cuDNN", cudnnGetErrorString(rt_cudnn_status_), \
                                                  nullptr, #call, __FILE__, __LINE__);            \
  } while (0)

#define CUBLAS_CHECK(call)                                                                      \
  do {                                                                                          \
    const cublasStatus_t rt_cublas_status_ = (call);                                            \
    if (rt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::ringtrain::backend::cuda::throw_gpu_error(                                              \
          "cuBLAS", ::ringtrain::backend::cuda::cublas_text(rt_cublas_status_), nullptr, #call, \
          __FILE__, __LINE__);                                                                  \
  } while (0)
