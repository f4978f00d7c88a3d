// check.hpp — CUDNN_CHECK and CUBLAS_CHECK (CUDA_CHECK is in the public backend/cuda_runtime.hpp):
// rank, host, file:line and the library's own error text, thrown as ringtrain::Error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "ringtrain/backend/cuda_runtime.hpp"

namespace ringtrain::backend::cuda {

const char* cublas_text(cublasStatus_t status);

}  // namespace ringtrain::backend::cuda

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
