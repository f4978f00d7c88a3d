// nccl_allreducer.cpp — Algorithm::nccl: ncclAllReduce of device memory on a communication
// stream that never hangs: a non-blocking set-up agreed by every rank (collective_setup.hpp),
// waits that poll NCCL's asynchronous error (device_wait.hpp), and an abort instead of a
// destroy once the communicator has failed. Compiles to nothing without CUDA.
#include "ringtrain/build_config.hpp"

#if RINGTRAIN_HAS_CUDA

#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "fp16_predivide.hpp"
#include "nccl_allreducer.hpp"
#include "ringtrain/backend/cuda_runtime.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/allreduce/collective_setup.hpp"
#include "ringtrain/comm/allreduce/device_wait.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

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

// A non-blocking communicator may answer ncclInProgress to any call: true when the call is done,
// false when it is in progress (a wait follows), an Error naming the call otherwise.
bool nccl_queued(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return true;
  if (result == ncclInProgress) return false;
  ::ringtrain::backend::cuda::throw_gpu_error("NCCL", ncclGetErrorString(result), nccl_hint(result),
                                              call, file, line);
}
#define NCCL_QUEUED(call) nccl_queued((call), #call, __FILE__, __LINE__)

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
      : mpi_(duplicate(comm.raw())),
        options_(options),
        device_(options.cuda_device),
        fp16_predivide_(fp16_predivisor(comm.size())),
        where_(str("rank ", comm.rank(), " (host ", comm.hostname(), ")")) {
    set_up_collectively(comm, "nccl set-up", options_.stall_timeout_s, set_up_ops(comm));
  }

  // After an error what was queued never finishes: abort. Else finalize (it flushes what is in
  // flight and, non-blocking, answers in progress), wait until it is done, then destroy; all
  // before the members free the staging memory and the stream NCCL may still use.
  ~NcclAllreduce() override {
    if (nccl_ == nullptr) return;
    (void)cudaSetDevice(device_);
    if (!failed_ && finalized())
      (void)ncclCommDestroy(nccl_);
    else
      (void)ncclCommAbort(nccl_);
  }

  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }

  // Conversions, the sum and the division all queued on the stream; one wait at the end, the
  // one the fusion engine needs to know the bucket is reduced. The division is a kernel, not
  // ncclAvg: ncclAvg divides by the world size only (the engine divides by world x
  // micro-batches) and, for floats, pre-multiplies every input by 1/n, which rounds otherwise
  // than the sum divided once (allreduce.hpp's contract, every_algorithm_means_device_memory).
  void sum_and_divide(float* data, size_t count, float divisor) override {
    std::lock_guard<std::mutex> lock(mutex_);
    RT_CHECK(!failed_, "nccl allreduce on ", where_, ": the communicator failed earlier");
    if (options_.validate_counts) check_same_count(mpi_.get(), count, "nccl allreduce");
    if (count == 0) return;
    bind_device();  // the fusion engine's comm thread has no device of its own
    try {
      check_device_memory(data, count);
      enqueue(data, count, divisor);
      wait(str("nccl allreduce of ", count, " floats at ", static_cast<const void*>(data), " on ",
               where_));
    } catch (...) {
      failed_ = true;
      abort_communicator();
      throw;
    }
  }

  bool wait_on_device(const void* ready_event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    bind_device();
    auto event = static_cast<cudaEvent_t>(const_cast<void*>(ready_event));
    CUDA_CHECK(cudaStreamWaitEvent(stream_->get(), event, 0));
    return true;
  }

  // Only flags the wait (it aborts, on its own thread); NCCL is not called from this thread.
  std::string on_stall() override {
    stall_.store(true);
    std::lock_guard<std::mutex> lock(status_mutex_);
    return waiting_for_.empty() ? std::string()
                                : waiting_for_ + " had not finished, and NCCL reported no error";
  }

  std::string name() const override {
    return options_.wire == Wire::fp32 ? "nccl" : "nccl/" + to_string(options_.wire);
  }

 private:
  void bind_device() const { CUDA_CHECK(cudaSetDevice(device_)); }

  // Every byte of [data, data + count) is memory of this communicator's device.
  void check_device_memory(const float* data, size_t count) const {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) (void)cudaGetLastError();
    const bool on_device =
        attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    RT_CHECK(on_device, "nccl allreduce of ", count, " floats at ", static_cast<const void*>(data),
             " on ", where_,
             ": is host memory; algorithm nccl reduces GPU memory (use it with the cuda backend, "
             "ring or mpi otherwise)");
    RT_CHECK(attributes.device == device_, "nccl allreduce of ", count, " floats at ",
             static_cast<const void*>(data), " on ", where_, ": is memory of GPU ",
             attributes.device, ", but the communicator is on GPU ", device_);
  }

  // The conversions and the division around the sum, queued on one stream in that order: the
  // kernels behind the sum only once NCCL has launched it (queue_in_order).
  void enqueue(float* data, size_t count, float divisor) {
    cudaStream_t s = stream_->get();
    const auto n = static_cast<int64_t>(count);
    const bool packed = options_.wire != Wire::fp32;  // a 16-bit wire: converted around the sum
    const bool bf16 = options_.wire == Wire::bf16;
    auto* wire =
        packed ? static_cast<uint16_t*>(staging_.reserve(count * sizeof(uint16_t))) : nullptr;
    // fp16 (largest value 65504): each rank sends its value / P, P the power of two from the
    // world size up, so no partial sum NCCL forms outgrows one rank's largest value (as the
    // host wire's pre-divide, fp16_predivide.hpp); exact, as P is a power of two. bf16 has
    // fp32's range: nothing to do.
    const float predivide = options_.wire == Wire::fp16 ? fp16_predivide_ : 1.0f;
    divisor /= predivide;
    OrderedCollective steps;
    steps.before = [=] {
      if (predivide != 1.0f) backend::cuda::kernels::divide(data, n, predivide, s);
      if (packed && bf16) backend::cuda::kernels::f32_to_bf16(data, wire, n, s);
      if (packed && !bf16) backend::cuda::kernels::f32_to_f16(data, wire, n, s);
    };
    steps.collective = [=] {
      if (!packed)
        return NCCL_QUEUED(ncclAllReduce(data, data, count, ncclFloat, ncclSum, nccl_, s));
      return NCCL_QUEUED(
          ncclAllReduce(wire, wire, count, bf16 ? ncclBfloat16 : ncclHalf, ncclSum, nccl_, s));
    };
    steps.after = [=] {
      if (packed && bf16) backend::cuda::kernels::bf16_to_f32(wire, data, n, s);
      if (packed && !bf16) backend::cuda::kernels::f16_to_f32(wire, data, n, s);
      if (divisor != 1.0f) backend::cuda::kernels::divide(data, n, divisor, s);
    };
    DeviceWaitOps launched = poll_ops();
    launched.finished = [this] { return nccl_state() != ncclInProgress; };
    queue_in_order(str("nccl allreduce of ", count, " floats on ", where_),
                   options_.stall_timeout_s, steps, launched);
  }

  // ncclCommFinalize polled to ncclSuccess within the stall timeout; false when it failed.
  bool finalized() noexcept {
    try {
      if (!NCCL_QUEUED(ncclCommFinalize(nccl_))) {
        DeviceWaitOps ops = poll_ops();
        ops.abort = [] {};  // the destructor aborts
        ops.finished = [this] { return nccl_state() == ncclSuccess; };
        wait_for_device(str("nccl finalize on ", where_), options_.stall_timeout_s, ops);
      }
      return true;
    } catch (const std::exception& e) {
      log::warn(e.what());
      return false;
    }
  }

  // Until the stream has run everything queued, or NCCL fails, stalls or times out.
  void wait(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(status_mutex_);
      waiting_for_ = what;
    }
    DeviceWaitOps ops = poll_ops();
    ops.finished = [this] {
      if (nccl_state() == ncclInProgress) return false;
      const cudaError_t done = cudaStreamQuery(stream_->get());
      if (done == cudaErrorNotReady) return false;
      CUDA_CHECK(done);
      return true;
    };
    wait_for_device(what, options_.stall_timeout_s, ops);
    std::lock_guard<std::mutex> lock(status_mutex_);
    waiting_for_.clear();
  }

  // NCCL's state, its asynchronous error as text, and the abort; `finished` is the caller's.
  DeviceWaitOps poll_ops() {
    DeviceWaitOps ops;
    ops.async_error = [this] { return async_error_text(); };
    ops.abort = [this] { abort_communicator(); };
    ops.stalled = [this] { return stall_.load(); };
    return ops;
  }

  ncclResult_t nccl_state() const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(nccl_, &state);
    return asked == ncclSuccess ? state : asked;
  }

  std::string async_error_text() const {
    if (nccl_ == nullptr) return {};
    const ncclResult_t state = nccl_state();
    if (state == ncclSuccess || state == ncclInProgress) return {};
    const char* last = ncclGetLastError(nccl_);
    const char* hint = nccl_hint(state);
    return str(ncclGetErrorString(state), last && *last ? str(" (", last, ")") : std::string(),
               hint ? str(" [hint: ", hint, "]") : std::string());
  }

  void abort_communicator() noexcept {
    if (nccl_ == nullptr) return;
    failed_ = true;
    (void)ncclCommAbort(nccl_);
    nccl_ = nullptr;
  }

  // Rank 0's id, a non-blocking init on this rank's device, polled until ready.
  CollectiveSetupOps set_up_ops(const Communicator& comm) {
    CollectiveSetupOps ops;
    ops.make_id = [] {
      ncclUniqueId id{};
      (void)NCCL_QUEUED(ncclGetUniqueId(&id));
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      return std::vector<uint8_t>(bytes, bytes + sizeof id);
    };
    ops.start = [this, size = comm.size(), rank = comm.rank()](const std::vector<uint8_t>& bytes) {
      RT_CHECK(bytes.size() == sizeof(ncclUniqueId), "nccl set-up: an id of ", bytes.size(),
               " bytes");
      // Here, not before set-up: a rank whose device fails must still reach the agreement.
      bind_device();
      stream_ = std::make_unique<backend::cuda::Stream>();
      ncclUniqueId id{};
      std::memcpy(&id, bytes.data(), sizeof id);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;  // returns at once; the wait below bounds how long it may take
      (void)NCCL_QUEUED(ncclCommInitRankConfig(&nccl_, size, id, rank, &config));
    };
    ops.wait = poll_ops();
    ops.wait.finished = [this] { return nccl_state() == ncclSuccess; };
    return ops;
  }

  CommHandle mpi_;
  AllreduceOptions options_;
  int device_;
  float fp16_predivide_;  // P: the power of two from the world size up
  std::string where_;     // "rank R (host H)", for messages
  std::unique_ptr<backend::cuda::Stream> stream_;
  ncclComm_t nccl_ = nullptr;
  bool failed_ = false;  // an error left work in flight: abort, never destroy
  DeviceBuffer staging_;
  std::mutex mutex_;  // one call at a time

  std::atomic<bool> stall_{false};  // set by the stall watchdog's thread
  std::mutex status_mutex_;         // guards waiting_for_ against on_stall()
  std::string waiting_for_;
};

}  // namespace

namespace {

// Every rank's (host, bus id of its device), gathered on rank 0, checked there, and the verdict
// broadcast: every rank refuses together, before any of them enters NCCL's set-up.
void check_one_rank_per_gpu(const Communicator& comm, int device) {
  const std::vector<std::string> ids = backend::cuda_visible_bus_ids();
  const std::string mine =
      device >= 0 && size_t(device) < ids.size() ? ids[size_t(device)] : str("device ", device);
  const std::vector<std::string> records =
      comm.gather_strings_to_root(str(comm.hostname(), '\n', mine));
  std::string shared;
  if (comm.rank() == 0) {
    std::vector<backend::RankGpu> gpus;
    for (const std::string& record : records) {
      const size_t cut = record.find('\n');
      gpus.push_back({record.substr(0, cut), record.substr(cut + 1)});
    }
    shared = backend::first_shared_gpu(gpus);
  }
  std::vector<uint8_t> bytes(shared.begin(), shared.end());
  comm.broadcast(bytes, 0);
  shared.assign(bytes.begin(), bytes.end());
  RT_REQUIRE_INPUT(shared.empty(), "comm.algorithm = nccl: ", shared,
                   ", and NCCL runs one rank per GPU; with train.share_gpus = true use "
                   "comm.algorithm = auto or ring (they reduce through host memory), or launch "
                   "one rank per GPU");
}

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const Communicator& comm,
                                                 const AllreduceOptions& options) {
  // Every rank checks its GPU first and all agree, so no rank enters NCCL's set-up alone.
  const bool have_gpu = backend::cuda_device_count() > 0;
  const bool all_have_gpu = comm.all_ok(have_gpu);
  RT_REQUIRE_INPUT(have_gpu, "comm.algorithm = nccl: no GPU visible (",
                   backend::cuda_device_status(), ")");
  RT_REQUIRE_INPUT(all_have_gpu, "comm.algorithm = nccl: another rank has no GPU visible");
  check_one_rank_per_gpu(comm, options.cuda_device);
  return std::make_unique<NcclAllreduce>(comm, options);
}

}  // namespace ringtrain::comm::allreduce

#endif  // RINGTRAIN_HAS_CUDA
