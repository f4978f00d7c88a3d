// versions.cpp — the GPU and the versions of the CUDA libraries this process loaded (not the ones
// it was built against alone), for the start line and the results file.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "context.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

// CUDA's 13000 style -> "13.0".
std::string cuda_version_text(int v) {
  return str(v / 1000, ".", (v % 1000) / 10);
}

// cuDNN 9's 91900 style -> "9.19.0".
std::string cudnn_version_text(size_t v) {
  return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

}  // namespace

// "NVIDIA H100 80GB HBM3 (sm_90, 0000:3B:00.0), driver 13.0, runtime 13.0, cuDNN 9.19.0,
// cuBLAS 130100, NCCL 2.28.3"; a library built against another version than the one loaded
// says both, as a mismatch is the first suspect when a kernel fails.
std::string library_versions(int device) noexcept {
  try {
    cudaDeviceProp prop{};
    std::string gpu = "GPU ?";
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
      gpu = str(prop.name, " (sm_", prop.major, prop.minor, ")");
    int driver = 0, runtime = 0, nccl = 0, cublas = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)ncclGetVersion(&nccl);
    (void)cublasGetProperty(MAJOR_VERSION, &cublas);
    int cublas_minor = 0, cublas_patch = 0;
    (void)cublasGetProperty(MINOR_VERSION, &cublas_minor);
    (void)cublasGetProperty(PATCH_LEVEL, &cublas_patch);
    (void)cudaGetLastError();
    const size_t cudnn = cudnnGetVersion();
    std::string text = str(gpu, ", driver ", cuda_version_text(driver), ", runtime ",
                           cuda_version_text(runtime), ", cuDNN ", cudnn_version_text(cudnn));
    if (cudnn != CUDNN_VERSION)
      text += str(" (built with ", cudnn_version_text(CUDNN_VERSION), ")");
    text += str(", cuBLAS ", cublas, ".", cublas_minor, ".", cublas_patch, ", NCCL ", nccl / 10000,
                ".", (nccl % 10000) / 100, ".", nccl % 100);
    if (nccl != NCCL_VERSION_CODE)
      text += str(" (built with ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, ")");
    return text;
  } catch (...) {
    return "versions unknown";
  }
}

}  // namespace ringtrain::backend::cuda
