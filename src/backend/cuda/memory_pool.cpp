// memory_pool.cpp — the caching device allocator.
#include "memory_pool.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "check.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {

std::shared_ptr<DevicePool> DevicePool::create(int device) {
  const char* setting = std::getenv("RINGTRAIN_CUDA_POOL");
  const bool caching = setting == nullptr || std::strcmp(setting, "off") != 0;
  return create(device, caching);
}

std::shared_ptr<DevicePool> DevicePool::create(int device, bool caching) {
  return std::shared_ptr<DevicePool>(new DevicePool(device, caching));
}

DevicePool::~DevicePool() {
  release_cached();
}

size_t DevicePool::size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20, kLargeStep = size_t(2) << 20;
  if (bytes <= kSmall) return kSmall;
  if (bytes <= kLarge) {
    size_t size = kSmall;
    while (size < bytes) size <<= 1;
    return size;
  }
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

std::shared_ptr<void> DevicePool::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = free_[size];
    if (!list.empty()) {
      block = list.back();
      list.pop_back();
      cached_ -= size;
    }
  }
  if (block == nullptr) {
    CUDA_CHECK(cudaSetDevice(device_));
    if (cudaMalloc(&block, size) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free allocation error, then retry once
      release_cached();
      CUDA_CHECK(cudaMalloc(&block, size));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++mallocs_;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
  }
  std::shared_ptr<DevicePool> self = shared_from_this();
  return std::shared_ptr<void>(block, [self, size](void* p) { self->give_back(p, size); });
}

void DevicePool::give_back(void* block, size_t size) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ -= size;
  if (!caching_) {
    (void)cudaFree(block);  // implicitly synchronises the device first
    return;
  }
  free_[size].push_back(block);
  cached_ += size;
}

void DevicePool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Blocks may still be read by queued kernels: wait for the device before freeing.
  if (cached_ > 0) (void)cudaDeviceSynchronize();
  for (auto& [size, list] : free_)
    for (void* block : list) (void)cudaFree(block);
  free_.clear();
  cached_ = 0;
}

size_t DevicePool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}
size_t DevicePool::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}
size_t DevicePool::device_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mallocs_;
}

}  // namespace ringtrain::backend::cuda
