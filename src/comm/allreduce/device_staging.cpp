// device_staging.cpp — host-memory allreducers on GPU memory: staged through pinned host
// buffers, or handed to a CUDA-aware MPI. Compiles to nothing without CUDA.
#include "ringtrain/build_config.hpp"

#if RINGTRAIN_HAS_CUDA

#include <cuda_runtime_api.h>

#include <mutex>

#include "device_staging.hpp"
#include "ringtrain/backend/cuda_runtime.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace ringtrain::comm::allreduce {
namespace {

bool is_device_memory(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// Page-locked host memory, grown on demand, so the copies run at full PCIe speed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
  }
  float* reserve(size_t count) {
    if (count <= count_) return data_;
    if (data_ != nullptr) CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    count_ = 0;
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(float)));
    count_ = count;
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t count_ = 0;
};

class StagedAllreduce final : public Allreducer {
 public:
  StagedAllreduce(std::unique_ptr<Allreducer> inner, int device, bool pass_device)
      : inner_(std::move(inner)), device_(device), pass_device_(pass_device) {}

  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }

  void sum_and_divide(float* data, size_t count, float divisor) override {
    std::lock_guard<std::mutex> lock(mutex_);
    CUDA_CHECK(cudaSetDevice(device_));
    if (count == 0 || !is_device_memory(data)) return inner_->sum_and_divide(data, count, divisor);
    if (pass_device_) {  // CUDA-aware MPI sums device memory; the division is a kernel
      inner_->sum(data, count);
      if (divisor == 1.0f) return;
      backend::cuda::kernels::divide(data, int64_t(count), divisor, nullptr);
      CUDA_CHECK(cudaStreamSynchronize(nullptr));
      return;
    }
    float* host = staging_.reserve(count);
    // Plain cudaMemcpy: the caller has finished writing data (see allreduce.hpp).
    CUDA_CHECK(cudaMemcpy(host, data, count * sizeof(float), cudaMemcpyDeviceToHost));
    inner_->sum_and_divide(host, count, divisor);
    CUDA_CHECK(cudaMemcpy(data, host, count * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::string name() const override { return inner_->name(); }
  void set_spin_hint(const std::atomic<bool>* hint) override { inner_->set_spin_hint(hint); }

 private:
  std::unique_ptr<Allreducer> inner_;
  int device_;
  bool pass_device_;
  PinnedBuffer staging_;
  std::mutex mutex_;
};

}  // namespace

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::unique_ptr<Allreducer> stage_device_memory(std::unique_ptr<Allreducer> inner, int device,
                                                bool inner_takes_device_memory) {
  return std::make_unique<StagedAllreduce>(std::move(inner), device, inner_takes_device_memory);
}

}  // namespace ringtrain::comm::allreduce

#endif  // RINGTRAIN_HAS_CUDA
