// memory_pool.hpp — a caching device allocator: blocks are kept by size class and reused,
// so a training step after the first calls cudaMalloc never.
//
// RINGTRAIN_CUDA_POOL=off in the environment frees every block on release instead, so
// compute-sanitizer's memcheck sees use-after-free that reuse would hide.
//
// Safe for one compute stream: a block given back while kernels queued on that stream
// still read it is only handed out again to work queued later on the same stream, which
// runs after them. Memory used on another stream (NCCL) must be synchronised first.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ringtrain::backend::cuda {

class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  // Caching unless RINGTRAIN_CUDA_POOL=off.
  static std::shared_ptr<DevicePool> create(int device);
  static std::shared_ptr<DevicePool> create(int device, bool caching);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // At least `bytes` of device memory; the owner's deleter returns the block to the pool.
  std::shared_ptr<void> allocate(size_t bytes);
  // Frees every cached block (not those in use).
  void release_cached();

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  size_t device_allocations() const;  // cudaMalloc calls so far

  // The block size a request is served with: 512 B granules up to 1 MiB rounded to a
  // power of two, larger ones to a multiple of 2 MiB (bounded waste, few classes).
  static size_t size_class(size_t bytes);

 private:
  DevicePool(int device, bool caching) : device_(device), caching_(caching) {}
  void give_back(void* block, size_t size_class) noexcept;

  int device_;
  bool caching_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, cached_ = 0, mallocs_ = 0;
};

}  // namespace ringtrain::backend::cuda
