// memory_pool.cpp — the caching device allocator and CUDA's DeviceMemory.
#include "memory_pool.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "check.hpp"
#include "device_scope.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

class CudaMemory : public DeviceMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}

  void* allocate(size_t bytes) override {
    DeviceScope scope(device_);
    void* block = nullptr;
    const cudaError_t code = cudaMalloc(&block, bytes);
    if (code == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it, the pool frees its cache and retries
      return nullptr;
    }
    CUDA_CHECK(code);
    return block;
  }
  // Both on the pool's device whatever the calling thread's is: cudaDeviceSynchronize on
  // another device would not wait for this one, and a thread that never chose one would
  // make a context on GPU 0 for it.
  void free(void* block) noexcept override {
    DeviceScope scope(device_);
    (void)cudaFree(block);  // implicitly synchronises the device first
  }
  void synchronize() noexcept override {
    DeviceScope scope(device_);
    (void)cudaDeviceSynchronize();
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_memory(int device) {
  return std::make_unique<CudaMemory>(device);
}

std::shared_ptr<DevicePool> DevicePool::create(int device) {
  const char* setting = std::getenv("RINGTRAIN_CUDA_POOL");
  const bool caching = setting == nullptr || std::strcmp(setting, "off") != 0;
  return create(device, caching);
}

std::shared_ptr<DevicePool> DevicePool::create(int device, bool caching) {
  return create(make_cuda_memory(device), caching);
}

std::shared_ptr<DevicePool> DevicePool::create(std::unique_ptr<DeviceMemory> memory, bool caching) {
  return std::shared_ptr<DevicePool>(new DevicePool(std::move(memory), caching));
}

DevicePool::~DevicePool() {
  release_cached();
}

size_t DevicePool::size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20, kGranule = size_t(2) << 20;
  if (bytes <= kSmall) return kSmall;
  size_t power = kSmall;
  while (power < bytes) power <<= 1;
  if (power <= kLarge) return power;
  const size_t step = power / 8;  // bytes is in (power/2, power]: quarters of power/2
  const size_t size = (bytes + step - 1) / step * step;
  return (size + kGranule - 1) / kGranule * kGranule;
}

void* DevicePool::take_from(std::multimap<size_t, void*>& list, size_t wanted, size_t& size) {
  auto it = list.lower_bound(wanted);
  if (it == list.end() || !serves(it->first, wanted)) return nullptr;
  void* block = it->second;
  size = it->first;
  list.erase(it);
  return block;
}

// A recording takes from its own list first; nothing else ever does.
void* DevicePool::take_cached(size_t wanted, size_t& size) {
  if (recording_) {
    if (void* block = take_from(recording_->free, wanted, size)) {
      recording_->free_bytes -= size;
      kept_for_recordings_ -= size;
      return block;
    }
  }
  void* block = take_from(free_, wanted, size);
  if (block != nullptr) cached_ -= size;
  return block;
}

void* DevicePool::allocate_new(size_t size) {
  void* block = memory_->allocate(size);
  if (block == nullptr) {
    {
      // Freeing the cache waits for the device, which a stream being recorded forbids.
      std::lock_guard<std::mutex> lock(mutex_);
      RT_CHECK(!recording_, "cuda backend: out of device memory for ", size,
               " bytes while recording a CUDA graph (", in_use_, " in use, ", cached_,
               " cached); HINT: a smaller batch, or run the step eagerly");
    }
    const size_t freed = bytes_cached();
    release_cached();
    block = memory_->allocate(size);
    RT_CHECK(block != nullptr, "cuda backend: out of device memory for ", size, " bytes (",
             bytes_in_use(), " in use, ", freed,
             " cached bytes freed first); HINT: a smaller train.batch_per_rank, or fewer ranks "
             "per GPU");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++mallocs_;
  return block;
}

std::shared_ptr<void> DevicePool::allocate(size_t bytes) {
  const size_t wanted = size_class(bytes);
  size_t size = wanted;
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    block = take_cached(wanted, size);
  }
  if (block == nullptr) block = allocate_new(size);
  const size_t requested = (bytes + 511) / 512 * 512;
  const int tag = current_memory_tag();
  size_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    epoch = recordings_ended_;
    if (recording_) recording_->blocks.insert(block);
    in_use_ += size;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    requested_.take(tag, requested);
  }
  std::shared_ptr<DevicePool> self = shared_from_this();
  return std::shared_ptr<void>(block, [self, size, requested, tag, epoch](void* p) {
    self->give_back(p, size, requested, tag, epoch);
  });
}

void DevicePool::give_back(void* block, size_t size, size_t requested, int tag,
                           size_t epoch) noexcept {
  std::shared_ptr<Recorded> keeper;  // dropped after the lock: it may be the last reference
  bool kept = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= size;
    requested_.give(tag, requested);
    keeper = recording_of(block);
    if (keeper) {
      keeper->blocks.insert(block);
      keeper->free.emplace(size, block);
      keeper->free_bytes += size;
      kept_for_recordings_ += size;
    } else if (addressed_by_a_recording(epoch)) {
      held_.push_back({epoch, size, block});
      kept_for_recordings_ += size;
    } else if (caching_) {
      free_.emplace(size, block);
      cached_ += size;
    } else {
      kept = false;
    }
  }
  if (!kept) memory_->free(block);
}

bool DevicePool::addressed_by_a_recording(size_t epoch) {
  forget_gone_recordings();
  for (const auto& weak : recordings_)
    if (std::shared_ptr<Recorded> r = weak.lock(); r && !r->released && epoch < r->ended)
      return true;
  return false;
}

void DevicePool::forget_gone_recordings() {
  recordings_.erase(std::remove_if(recordings_.begin(), recordings_.end(),
                                   [](const std::weak_ptr<Recorded>& weak) {
                                     std::shared_ptr<Recorded> r = weak.lock();
                                     return !r || r->released;
                                   }),
                    recordings_.end());
}

void DevicePool::to_cache_or(std::multimap<size_t, void*>& blocks,
                             std::multimap<size_t, void*>& to_free) {
  for (const auto& [size, block] : blocks) {
    if (caching_) {
      free_.emplace(size, block);
      cached_ += size;
    } else {
      to_free.emplace(size, block);
    }
  }
  blocks.clear();
}

std::shared_ptr<DevicePool::Recorded> DevicePool::recording_of(void* block) {
  forget_gone_recordings();
  for (const auto& weak : recordings_)
    if (std::shared_ptr<Recorded> r = weak.lock(); r && !r->released && r->blocks.count(block))
      return r;
  return recording_;
}

std::shared_ptr<void> DevicePool::recording(const std::function<void()>& record) {
  auto recorded = std::make_shared<Recorded>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RT_CHECK(!recording_, "cuda memory pool: a recording while another one runs");
    recording_ = recorded;
    recordings_.push_back(recorded);
  }
  try {
    record();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      recording_.reset();
    }
    release_recorded(*recorded);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_.reset();
    recorded->ended = ++recordings_ended_;
  }
  std::shared_ptr<DevicePool> self = shared_from_this();
  return std::shared_ptr<void>(recorded.get(),
                               [self, recorded](void*) { self->release_recorded(*recorded); });
}

// The recording's blocks, and the held ones no live recording may address any more, go back.
void DevicePool::release_recorded(Recorded& recorded) noexcept {
  std::multimap<size_t, void*> to_free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recorded.released) return;
    recorded.released = true;
    recorded.blocks.clear();
    kept_for_recordings_ -= recorded.free_bytes;
    recorded.free_bytes = 0;
    to_cache_or(recorded.free, to_free);
    std::multimap<size_t, void*> unheld;
    auto still = std::stable_partition(held_.begin(), held_.end(), [&](const Held& h) {
      return addressed_by_a_recording(h.epoch);
    });
    for (auto it = still; it != held_.end(); ++it) {
      unheld.emplace(it->size, it->block);
      kept_for_recordings_ -= it->size;
    }
    held_.erase(still, held_.end());
    to_cache_or(unheld, to_free);
  }
  for (const auto& [size, block] : to_free) memory_->free(block);
}

void DevicePool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.empty()) return;
  // Blocks may still be read by queued kernels: wait for the device before freeing.
  memory_->synchronize();
  for (auto& [size, block] : free_) memory_->free(block);
  free_.clear();
  cached_ = 0;
}

size_t DevicePool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}
size_t DevicePool::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_in_use_;
}
size_t DevicePool::bytes_requested_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_.in_use();
}
size_t DevicePool::peak_bytes_requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_.peak();
}
MemoryByTag DevicePool::requested_at_peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_.at_peak();
}
void DevicePool::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_in_use_ = in_use_;
  requested_.reset_peak();
}
size_t DevicePool::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}
size_t DevicePool::bytes_kept_for_recordings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_for_recordings_;
}
size_t DevicePool::device_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mallocs_;
}

}  // namespace ringtrain::backend::cuda
