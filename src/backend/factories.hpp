// factories.hpp — constructors of the concrete backends, for make_backend (internal).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"

namespace ringtrain::backend {

std::unique_ptr<Backend> make_cpu_backend(int threads, Precision precision,
                                          ConvWeightGrad weight_grad, ConvAlgorithm conv_algorithm);
std::unique_ptr<Backend> make_ref_backend(int threads);
// fp32 backend -> its bf16 reference: every op's stored activations (and the weights it
// multiplies) rounded to bf16, arithmetic in fp32 (ref/bf16_reference.cpp).
std::unique_ptr<Backend> make_bf16_reference(std::unique_ptr<Backend> fp32);

namespace cuda {
// What cudaGetDeviceCount says, probed once per process (backend/cuda/, CUDA builds only).
struct DeviceProbe {
  int count = 0;
  std::string status;
};
DeviceProbe probe_devices() noexcept;
// cudaDeviceGetPCIBusId of every visible device (see cuda_visible_bus_ids).
std::vector<std::string> visible_bus_ids() noexcept;
// cudaProfilerStart / cudaProfilerStop (see cuda_profiler_range).
void profiler_range(bool on) noexcept;
// The device's name and compute capability and the loaded CUDA, cuDNN, cuBLAS and NCCL versions.
std::string library_versions(int device) noexcept;
std::unique_ptr<Backend> create_backend(const CudaOptions& options);
}  // namespace cuda

// Host memory aligned to 64 bytes, at least `bytes` long, freed by the returned owner; from
// kHugePageBytes on, aligned to that and offered transparent huge pages (unless
// RINGTRAIN_HUGE_PAGES=off).
constexpr size_t kHugePageBytes = size_t(2) << 20;
std::shared_ptr<void> aligned_host_alloc(size_t bytes);
// How many blocks aligned_host_alloc has offered huge pages since the start. Whether a block's
// mapping is eligible (smaps) also depends on what the allocator carved it from: memory of an
// earlier, offered block stays eligible. The count says what this allocator did itself.
uint64_t huge_page_offers();
// What aligned_host_alloc has handed out and not yet had back, over the whole process: now,
// and the most at once since the start or reset_host_tensor_peak().
MemoryUse host_tensor_memory();
void reset_host_tensor_peak();

}  // namespace ringtrain::backend
