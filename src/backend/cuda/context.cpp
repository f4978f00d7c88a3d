// context.cpp — the CUDA context ops share; device probing; the tensor checks; the forms
// activations take and the conversions between them.
#include "context.hpp"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

// Whether the context holds one workspace block for its life (Context::workspace).
bool workspace_kept() {
  return env_switch("RINGTRAIN_CUDA_WORKSPACE", "per-call", "kept");
}

// The three sizes a conversion kernel walks: [n, c, hw] (2-D [N, F]: n = N, c = F).
struct Dims {
  int64_t n = 1, c = 1, hw = 1;
};
Dims dims_of(const Shape& shape) {
  Dims d;
  if (shape.size() >= 2) d.n = shape[0], d.c = shape[1];
  if (shape.size() == 1) d.c = shape[0];
  for (size_t i = 2; i < shape.size(); ++i) d.hw *= shape[i];
  return d;
}

}  // namespace

std::shared_ptr<const Layout> nhwc_layout() {
  static const std::shared_ptr<const Layout> layout = std::make_shared<NhwcLayout>();
  return layout;
}

bool is_nhwc(const Tensor& t) {
  return t.layout() != nullptr && dynamic_cast<const NhwcLayout*>(t.layout().get()) != nullptr;
}

kernels::Elem elem_of(DType dtype) {
  return dtype == DType::kBF16  ? kernels::Elem::kBF16
         : dtype == DType::kF16 ? kernels::Elem::kF16
                                : kernels::Elem::kF32;
}

cudnnDataType_t cudnn_type(DType dtype) {
  return dtype == DType::kBF16  ? CUDNN_DATA_BFLOAT16
         : dtype == DType::kF16 ? CUDNN_DATA_HALF
                                : CUDNN_DATA_FLOAT;
}

void describe(const TensorDesc& d, const Tensor& t) {
  RT_CHECK(t.rank() == 4 || t.rank() == 2, "cuda backend: tensor ", shape_str(t.shape()),
           " is neither 4-D nor 2-D");
  RT_CHECK(t.is_plain() || is_nhwc(t), "cuda backend: tensor ", shape_str(t.shape()),
           " has a layout cuDNN cannot be told");
  auto dim = [&](size_t i) { return i < t.rank() ? int(t.dim(i)) : 1; };
  set_4d(d, is_nhwc(t) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_type(t.dtype()), dim(0),
         dim(1), dim(2), dim(3));
}

DeviceProbe probe_devices() noexcept {
  // Probed once: later calls neither pay for it nor see a different answer.
  static const DeviceProbe probe = probe_once();
  return probe;
}

std::vector<std::string> visible_bus_ids() noexcept {
  std::vector<std::string> ids;
  try {
    for (int device = 0; device < probe_devices().count; ++device) {
      char id[64] = {0};
      if (cudaDeviceGetPCIBusId(id, int(sizeof(id)), device) == cudaSuccess) {
        ids.emplace_back(id);
      } else {
        (void)cudaGetLastError();
        ids.push_back("device " + std::to_string(device));
      }
    }
  } catch (...) {  // std::bad_alloc: no list at all reads as no GPU, never a throw
    ids.clear();
  }
  return ids;
}

void profiler_range(bool on) noexcept {
  // A failure (no profiler attached is not one) only loses the range: cleared, not thrown.
  if ((on ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) (void)cudaGetLastError();
}

Context::Context(const CudaOptions& options)
    : device_(bind_device(options.device)),
      pool_(DevicePool::create(options.device)),
      workspace_limit_(options.workspace_limit_mib << 20),
      precision_(options.precision),
      deterministic_(options.deterministic),
      workspace_kept_(workspace_kept()) {
  CUDNN_CHECK(cudnnSetStream(cudnn_.get(), stream_.get()));
  CUBLAS_CHECK(cublasSetStream(cublas_.get(), stream_.get()));
  // fp32 GEMMs stay fp32 unless TF32 is asked for: the tests hold them to the reference.
  CUBLAS_CHECK(cublasSetMathMode(cublas_.get(), precision_ == Precision::kTF32
                                                    ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
}

DType Context::act_dtype() const {
  return precision_ == Precision::kBF16  ? DType::kBF16
         : precision_ == Precision::kF16 ? DType::kF16
                                         : DType::kF32;
}

cudnnMathType_t Context::conv_math() const {
  if (act_dtype() != DType::kF32) return CUDNN_TENSOR_OP_MATH;
  return precision_ == Precision::kTF32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

void Context::ensure_as(Tensor& t, const Shape& shape, DType dtype, bool nhwc) const {
  if (!t.empty() && t.shape() == shape && t.dtype() == dtype && is_nhwc(t) == nhwc &&
      (nhwc || t.is_plain()))
    return;
  RT_CHECK(!t.is_view(), "cuda backend: a view ", shape_str(t.shape()), " cannot become ",
           shape_str(shape), " ", dtype_name(dtype));
  RT_CHECK(!nhwc || shape.size() == 4, "cuda backend: NHWC needs a 4-D shape, not ",
           shape_str(shape));
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  t = Tensor(shape, dtype, pool_->allocate(bytes), bytes, nhwc ? nhwc_layout() : nullptr);
}

void Context::convert(const Tensor& src, Tensor& dst) const {
  RT_CHECK(src.shape() == dst.shape(), "cuda backend: convert ", shape_str(src.shape()), " into ",
           shape_str(dst.shape()));
  const Dims d = dims_of(src.shape());
  kernels::convert(src.raw(), elem_of(src.dtype()), is_nhwc(src), dst.raw(), elem_of(dst.dtype()),
                   is_nhwc(dst), d.n, d.c, d.hw, stream());
}

const Tensor& Context::as(const Tensor& t, DType dtype, bool nhwc, Tensor& scratch) const {
  expect_present(t, "an op's input");
  nhwc = nhwc && t.rank() == 4;
  if (t.dtype() == dtype && is_nhwc(t) == nhwc && (nhwc || t.is_plain())) return t;
  ensure_as(scratch, t.shape(), dtype, nhwc);
  convert(t, scratch);
  return scratch;
}

Context::~Context() {
  teardown_.enter(device_);
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

std::shared_ptr<void> Context::workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  workspace_peak_ = std::max(workspace_peak_, bytes);
  const MemoryTagScope tag(kWorkspaceTag);  // booked apart from the op that asked for it
  if (!workspace_kept_) return pool_->allocate(bytes);
  if (bytes > kept_workspace_bytes_) {
    kept_workspace_.reset();  // back to the pool first, so the larger block may reuse it
    kept_workspace_ = pool_->allocate(bytes);
    kept_workspace_bytes_ = bytes;
  }
  return kept_workspace_;
}

void expect_present(const Tensor& t, const char* what) {
  RT_CHECK(!t.empty(), "cuda backend: ", what, " is empty");
}

void expect_f32(const Tensor& t, const char* what) {
  RT_CHECK(!t.empty() && t.is_plain() && t.dtype() == DType::kF32, "cuda backend: ", what,
           " must be a plain fp32 device tensor");
}

}  // namespace ringtrain::backend::cuda
