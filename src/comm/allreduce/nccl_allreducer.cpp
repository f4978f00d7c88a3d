// nccl_allreducer.cpp — Algorithm::nccl: ncclAllReduce of device memory on a communication
// stream, the NCCL unique id broadcast over MPI. Compiles to nothing without CUDA.
#include "ringtrain/build_config.hpp"

#if RINGTRAIN_HAS_CUDA

#include <nccl.h>

#include <mutex>

#include "nccl_allreducer.hpp"
#include "ringtrain/backend/cuda_runtime.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {
namespace {

const char* nccl_hint(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return "a network or peer failure: set NCCL_DEBUG=WARN to see which";
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed: check the device binding and the driver";
    default:
      return nullptr;
  }
}

#define NCCL_CHECK(call)                                                                       \
  do {                                                                                         \
    const ncclResult_t rt_nccl_result_ = (call);                                               \
    if (rt_nccl_result_ != ncclSuccess)                                                        \
      ::ringtrain::backend::cuda::throw_gpu_error("NCCL", ncclGetErrorString(rt_nccl_result_), \
                                                  nccl_hint(rt_nccl_result_), #call, __FILE__, \
                                                  __LINE__);                                   \
  } while (0)

// Device memory for the 16-bit wire formats, grown on demand, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  void* reserve(size_t bytes) {
    if (bytes <= bytes_) return data_;
    if (data_ != nullptr) CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
    CUDA_CHECK(cudaMalloc(&data_, bytes));
    bytes_ = bytes;
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class NcclAllreduce final : public Allreducer {
 public:
  NcclAllreduce(const Communicator& comm, const AllreduceOptions& options)
      : mpi_(duplicate(comm.raw())), options_(options) {
    CUDA_CHECK(cudaGetDevice(&device_));
    stream_ = std::make_unique<backend::cuda::Stream>();
    ncclUniqueId id{};
    if (comm.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_.get()));
    NCCL_CHECK(ncclCommInitRank(&nccl_, comm.size(), id, comm.rank()));
  }
  ~NcclAllreduce() override {
    if (nccl_ != nullptr) (void)ncclCommDestroy(nccl_);
  }

  void sum(float* data, size_t count) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (options_.validate_counts) check_same_count(mpi_.get(), count, "nccl allreduce");
    if (count == 0) return;
    // The calling thread (the fusion engine's) may not have chosen a device yet.
    CUDA_CHECK(cudaSetDevice(device_));
    check_device_memory(data);
    cudaStream_t s = stream_->get();
    if (options_.wire == Wire::fp32) {
      NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum, nccl_, s));
    } else {
      auto* wire = static_cast<uint16_t*>(staging_.reserve(count * sizeof(uint16_t)));
      const bool bf16 = options_.wire == Wire::bf16;
      const auto n = static_cast<int64_t>(count);
      if (bf16)
        backend::cuda::kernels::f32_to_bf16(data, wire, n, s);
      else
        backend::cuda::kernels::f32_to_f16(data, wire, n, s);
      NCCL_CHECK(
          ncclAllReduce(wire, wire, count, bf16 ? ncclBfloat16 : ncclHalf, ncclSum, nccl_, s));
      if (bf16)
        backend::cuda::kernels::bf16_to_f32(wire, data, n, s);
      else
        backend::cuda::kernels::f16_to_f32(wire, data, n, s);
    }
    // sum() returns with the result in place, like the other algorithms.
    CUDA_CHECK(cudaStreamSynchronize(s));
  }

  // Device memory: the division is a kernel on the communication stream.
  void sum_and_divide(float* data, size_t count, float divisor) override {
    sum(data, count);
    if (count == 0 || divisor == 1.0f) return;
    std::lock_guard<std::mutex> lock(mutex_);
    CUDA_CHECK(cudaSetDevice(device_));
    backend::cuda::kernels::divide(data, int64_t(count), divisor, stream_->get());
    CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
  }

  std::string name() const override {
    return options_.wire == Wire::fp32 ? "nccl" : "nccl/" + to_string(options_.wire);
  }

 private:
  static void check_device_memory(const float* data) {
    cudaPointerAttributes attributes{};
    CUDA_CHECK(cudaPointerGetAttributes(&attributes, data));
    RT_CHECK(attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged,
             "nccl allreduce: the data at ", static_cast<const void*>(data),
             " is host memory; algorithm nccl reduces GPU memory (use it with the cuda backend, "
             "ring or mpi otherwise)");
  }

  CommHandle mpi_;
  AllreduceOptions options_;
  int device_ = 0;
  std::unique_ptr<backend::cuda::Stream> stream_;
  ncclComm_t nccl_ = nullptr;
  DeviceBuffer staging_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const Communicator& comm,
                                                 const AllreduceOptions& options) {
  // Every rank checks its GPU first and all agree, so no rank enters NCCL's set-up alone.
  const bool have_gpu = backend::cuda_device_count() > 0;
  const bool all_have_gpu = comm.all_ok(have_gpu);
  RT_REQUIRE_INPUT(have_gpu, "comm.algorithm = nccl: no GPU visible (",
                   backend::cuda_device_status(), ")");
  RT_REQUIRE_INPUT(all_have_gpu, "comm.algorithm = nccl: another rank has no GPU visible");
  return std::make_unique<NcclAllreduce>(comm, options);
}

}  // namespace ringtrain::comm::allreduce

#endif  // RINGTRAIN_HAS_CUDA
