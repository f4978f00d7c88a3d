// check.hpp — CUDNN_CHECK and CUBLAS_CHECK (CUDA_CHECK is in the public backend/cuda_runtime.hpp):
// rank, host, file:line and the library's own error text, thrown as ringtrain::Error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "ringtrain/backend/cuda_runtime.hpp"

namespace ringtrain::backend::cuda {

const char* cublas_text(cublasStatus_t status);

// Whether cuDNN refused a call for want of a kernel for its types, layouts or shapes (any
// NOT_SUPPORTED code, or BAD_PARAM, which some fused calls answer instead): the caller can
// run the same work unfused. Any other failure is an error.
inline bool cudnn_unsupported(cudnnStatus_t status) {
  const int category = int(status) / 1000 * 1000;  // CUDNN_STATUS_CATEGORY, cuDNN 9
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

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
