// check.cpp — the error text behind the CUDA, cuDNN, cuBLAS and NCCL check macros.
#include "check.hpp"

#include <unistd.h>

#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::backend::cuda {
namespace {

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

void throw_gpu_error(const char* library, const char* text, const char* hint, const char* call,
                     const char* file, int line) {
  std::string message = str(library, " call ", call, " failed on rank ", log::rank(), " (host ",
                            host_name(), ") at ", file, ":", line, ": ", text);
  if (hint != nullptr) message += str("\n  hint: ", hint);
  throw Error(message);
}

const char* cuda_hint(cudaError_t code) {
  switch (code) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
      return "no usable GPU: check nvidia-smi, CUDA_VISIBLE_DEVICES and the driver version";
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: lower the batch size or the cuDNN workspace limit";
    case cudaErrorInvalidDevice:
      return "the device index is not visible to this process (CUDA_VISIBLE_DEVICES?)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel faulted: rerun under compute-sanitizer (see docs/CUDA.md)";
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
      return "an op waited for the GPU, or used an event or memory CUDA cannot record, while a "
             "CUDA graph was being recorded (Backend::capture, rt-bench-compute --cuda-graph): "
             "this call is the one to move out of the recorded step";
    default:
      return nullptr;
  }
}

const char* cublas_text(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

}  // namespace ringtrain::backend::cuda
