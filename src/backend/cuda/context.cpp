// context.cpp — the CUDA context ops share; device probing; the plain-tensor checks.
#include "context.hpp"

#include "../factories.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

// Makes `device` current before any stream or handle is created on it.
int bind_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

DeviceProbe probe_once() noexcept {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();  // the runtime keeps the error; do not let it leak into others
    probe.status = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(code);
    return probe;
  }
  probe.count = count;
  probe.status = count == 0 ? "cudaGetDeviceCount: 0 devices" : std::to_string(count) + " devices";
  return probe;
}

}  // namespace

DeviceProbe probe_devices() noexcept {
  // Probed once: later calls neither pay for it nor see a different answer.
  static const DeviceProbe probe = probe_once();
  return probe;
}

Context::Context(const CudaOptions& options)
    : device_(bind_device(options.device)),
      pool_(DevicePool::create(options.device)),
      workspace_limit_(options.workspace_limit_mib << 20),
      precision_(options.precision),
      deterministic_(options.deterministic) {
  CUDNN_CHECK(cudnnSetStream(cudnn_.get(), stream_.get()));
  CUBLAS_CHECK(cublasSetStream(cublas_.get(), stream_.get()));
  // fp32 GEMMs stay fp32 unless TF32 is asked for: the tests hold them to the reference.
  CUBLAS_CHECK(cublasSetMathMode(cublas_.get(), precision_ == Precision::kTF32
                                                    ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
}

Tensor Context::alloc(const Shape& shape, DType dtype) const {
  for (int64_t d : shape)
    RT_CHECK(d >= 0, "cuda backend: negative dimension in ", shape_str(shape));
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(shape, dtype, pool_->allocate(bytes), bytes);
}

void Context::ensure(Tensor& t, const Shape& shape) const {
  if (!t.empty() && t.shape() == shape && t.dtype() == DType::kF32) return;
  RT_CHECK(!t.is_view(), "cuda backend: a view ", shape_str(t.shape()), " cannot become ",
           shape_str(shape));
  t = alloc(shape);
}

void* Context::workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > workspace_bytes_) {
    workspace_.reset();  // back to the pool first, so the larger block may reuse it
    workspace_ = pool_->allocate(bytes);
    workspace_bytes_ = bytes;
  }
  return workspace_.get();
}

void expect_f32(const Tensor& t, const char* what) {
  RT_CHECK(!t.empty() && t.is_plain() && t.dtype() == DType::kF32, "cuda backend: ", what,
           " must be a plain fp32 device tensor");
}

}  // namespace ringtrain::backend::cuda
