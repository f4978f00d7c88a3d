// memory_pool.hpp — a caching device allocator: blocks are kept by size class and reused,
// so a training step after the first calls cudaMalloc never.
//
// RINGTRAIN_CUDA_POOL=off in the environment frees every block on release instead, so
// compute-sanitizer's memcheck sees use-after-free that reuse would hide.
//
// Safe for one compute stream: a block given back while kernels queued on that stream
// still read it is only handed out again to work queued later on the same stream, which
// runs after them. Memory used on another stream (NCCL) must be synchronised first.
//
// The bookkeeping is host code over a DeviceMemory: CUDA's (which makes the pool's device
// current around every call, so blocks may be released from any thread) or a test's fake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "ringtrain/backend/memory_ledger.hpp"

namespace ringtrain::backend::cuda {

// The device calls a pool makes.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // `bytes` of device memory, or null when the device is out of memory (other failures throw).
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* block) noexcept = 0;
  // Waits until no queued work can still touch a block.
  virtual void synchronize() noexcept = 0;
};

// cudaMalloc/cudaFree/cudaDeviceSynchronize on `device`, made current around each call.
std::unique_ptr<DeviceMemory> make_cuda_memory(int device);

class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  // Caching unless RINGTRAIN_CUDA_POOL=off.
  static std::shared_ptr<DevicePool> create(int device);
  static std::shared_ptr<DevicePool> create(int device, bool caching);
  static std::shared_ptr<DevicePool> create(std::unique_ptr<DeviceMemory> memory, bool caching);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // At least `bytes` of device memory; the owner's deleter returns the block to the pool.
  // Out of device memory, the cached blocks are freed and the allocation tried once more.
  std::shared_ptr<void> allocate(size_t bytes);
  // Frees every cached block (not those in use), after waiting for the device.
  void release_cached();

  // Memory for work recorded once and replayed (a CUDA graph, capture_work). While `record`
  // runs, blocks given back go to a free list of the recording's own, which only the
  // recording takes from again, and every block it takes is marked as the recording's. After
  // it, the recording's blocks stay its own for as long as the returned handle lives: one
  // given back returns to that list, never to the cache nor to the device, since replays write
  // them with no host code in between. When the handle goes, the list's blocks return to the
  // cache (to the device without caching). If `record` throws, nothing was recorded: its
  // blocks return at once and the exception goes on. One recording at a time. A block taken
  // before a recording ended may be one its replays address (an op's scratch or the cuDNN
  // workspace, taken by an earlier step and kept): given back while that recording's handle
  // lives, it is held, handed to no one, until no live recording ended after it was taken.
  std::shared_ptr<void> recording(const std::function<void()>& record);
  size_t bytes_kept_for_recordings() const;

  size_t bytes_in_use() const;
  // The most bytes in use at once since the pool was made (blocks as served, size classes and
  // all): what a step needs, beside PyTorch's torch.cuda.max_memory_allocated.
  size_t peak_bytes_in_use() const;
  // The same for the bytes asked for, each rounded up to 512 as PyTorch's allocator rounds a
  // block, before size classes and best fit: what torch.cuda.max_memory_allocated counts.
  size_t bytes_requested_in_use() const;
  size_t peak_bytes_requested() const;
  // How that peak was split by the tag each request was made under (memory_ledger.hpp).
  MemoryByTag requested_at_peak() const;
  // Both peaks start again from what is in use now (a benchmark's timed steps after set-up).
  void reset_peak();
  size_t bytes_cached() const;
  size_t device_allocations() const;  // cudaMalloc calls so far

  // The block size a request is served with: 512 B granules up to 1 MiB rounded to a
  // power of two; larger ones to a quarter of their power of two (waste under 25%), at
  // least a multiple of 2 MiB.
  static size_t size_class(size_t bytes);
  // A cached block of class `cached` serves a request of class `wanted` when it is at most
  // half as large again: the smallest such block is taken (best fit), so requests of nearby
  // sizes share blocks instead of each class growing its own list.
  static bool serves(size_t cached, size_t wanted) {
    return cached >= wanted && cached <= wanted + wanted / 2;
  }

 private:
  DevicePool(std::unique_ptr<DeviceMemory> memory, bool caching)
      : memory_(std::move(memory)), caching_(caching) {}
  // A recording's blocks (recording()): those it may take again, and every block it took or
  // was given back while it ran.
  struct Recorded {
    std::multimap<size_t, void*> free;
    std::unordered_set<void*> blocks;
    size_t free_bytes = 0;
    size_t ended = SIZE_MAX;  // recordings ended once this one had (SIZE_MAX while it runs)
    bool released = false;    // its handle went: its blocks are anyone's again
  };
  // A block given back while a live recording may address it (allocate's `epoch`: the
  // recordings ended when it was taken).
  struct Held {
    size_t epoch, size;
    void* block;
  };
  void* take_cached(size_t wanted, size_t& size);
  static void* take_from(std::multimap<size_t, void*>& list, size_t wanted, size_t& size);
  void* allocate_new(size_t size);
  void give_back(void* block, size_t size, size_t requested, int tag, size_t epoch) noexcept;
  void release_recorded(Recorded& recorded) noexcept;
  // Whether a live recording ended after a block of this epoch was taken (its replays may
  // address the block). Under mutex_.
  bool addressed_by_a_recording(size_t epoch);
  // Drops the references to recordings whose handles went. Under mutex_.
  void forget_gone_recordings();
  // Blocks into the cache (caching) or onto `to_free` (not). Under mutex_.
  void to_cache_or(std::multimap<size_t, void*>& blocks, std::multimap<size_t, void*>& to_free);
  // The live recording that holds `block`, else the one running (which takes it), else null.
  std::shared_ptr<Recorded> recording_of(void* block);

  std::unique_ptr<DeviceMemory> memory_;
  bool caching_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;                // cached blocks by size, for best fit
  std::shared_ptr<Recorded> recording_;              // while recording() runs
  std::vector<std::weak_ptr<Recorded>> recordings_;  // those whose handles may live
  std::vector<Held> held_;                           // older blocks a live recording may address
  size_t recordings_ended_ = 0;
  size_t kept_for_recordings_ = 0;
  size_t in_use_ = 0, peak_in_use_ = 0, cached_ = 0, mallocs_ = 0;
  MemoryLedger requested_;  // the bytes asked for, 512-byte granules, by tag
};

}  // namespace ringtrain::backend::cuda
