// loader.cpp — the reader thread, its bounded queue and the consumer side.
#include "ringtrain/data/loader.hpp"

#include <algorithm>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::data {

Loader::Loader(ShardSet shards, const LoaderOptions& options)
    : shards_(std::move(shards)),
      info_(shards_.info()),
      options_(options),
      sampler_(
          options.max_samples > 0 ? std::min(info_.samples, options.max_samples) : info_.samples,
          options.batch_per_rank, options.world_size, options.remainder, options.shuffle,
          options.seed, options.accumulate_steps),
      normaliser_(info_.mean, info_.std) {
  RT_REQUIRE_INPUT(options.prefetch_batches >= 1, "prefetch_batches ", options.prefetch_batches,
                   ": must be at least 1");
  RT_REQUIRE_INPUT(options.augment_pad >= 0, "augment_pad ", options.augment_pad,
                   ": must not be negative");
  RT_REQUIRE_INPUT(options.augment != AugmentKind::kDihedral || info_.height == info_.width,
                   "data.augment = dihedral: ", split_files(info_), " holds ", info_.height, "x",
                   info_.width, " images; its rotations by 90 degrees need square ones");
  RT_CHECK(options.rank >= 0 && options.rank < options.world_size, "rank ", options.rank,
           " outside world of ", options.world_size);
  if (options.inspect_labels) {
    for (const char* name : {"multi_hot", "pass", "zone_pass"})
      RT_REQUIRE_INPUT(shards_.has(name), split_files(info_), ": no /", name,
                       " labels, which model.heads = inspect trains on (fiber shards from "
                       "rt-fibergen have them)");
    defect_names_ = shards_.extra_names("multi_hot");
    RT_REQUIRE_INPUT(
        defect_names_.size() == shards_.row_elements("multi_hot") &&
            shards_.row_elements("pass") == 1 && shards_.row_elements("zone_pass") == 4,
        split_files(info_), ": multi_hot has ", shards_.row_elements("multi_hot"), " columns and ",
        defect_names_.size(), " names, pass and zone_pass need 1 and 4 columns");
  }
  thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  to_reader_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::start_epoch(int epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    epoch_ = epoch;
    epoch_started_ = true;
    epoch_done_ = false;
    error_ = nullptr;
    for (auto& b : queue_) recycled_.push_back(std::move(b));
    queue_.clear();
  }
  to_reader_.notify_all();
}

bool Loader::next(Batch& batch) {
  Stopwatch waited;
  std::unique_lock<std::mutex> lock(mutex_);
  RT_CHECK(epoch_started_, "Loader::next before start_epoch");
  to_consumer_.wait(lock, [&] { return !queue_.empty() || error_ || epoch_done_; });
  if (error_) std::rethrow_exception(error_);
  if (queue_.empty()) return false;
  std::swap(batch, queue_.front());
  recycled_.push_back(std::move(queue_.front()));
  queue_.pop_front();
  batch.wait_seconds = waited.seconds();
  lock.unlock();
  to_reader_.notify_all();
  return true;
}

void Loader::run() {
  h5::quiet_this_thread();
  uint64_t done_generation = 0;
  for (;;) {
    uint64_t generation;
    int epoch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      to_reader_.wait(lock, [&] { return stopping_ || generation_ != done_generation; });
      if (stopping_) return;
      generation = generation_;
      epoch = epoch_;
    }
    try {
      produce_epoch(generation, epoch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation == generation_) error_ = std::current_exception();
    }
    done_generation = generation;
    to_consumer_.notify_all();
  }
}

void Loader::produce_epoch(uint64_t generation, int epoch) {
  const std::vector<int64_t> order = sampler_.epoch_order(epoch);
  const int64_t steps = steps_per_epoch();
  for (int64_t step = 0; step < steps; ++step) {
    Batch batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || generation != generation_) return;
      if (!recycled_.empty()) {
        batch = std::move(recycled_.back());
        recycled_.pop_back();
      }
    }
    fill(batch, order, epoch, step);
    std::unique_lock<std::mutex> lock(mutex_);
    to_reader_.wait(lock, [&] {
      return stopping_ || generation != generation_ ||
             int(queue_.size()) < options_.prefetch_batches;
    });
    if (stopping_ || generation != generation_) return;
    queue_.push_back(std::move(batch));
    lock.unlock();
    to_consumer_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation == generation_) epoch_done_ = true;
}

void Loader::fill(Batch& batch, const std::vector<int64_t>& order, int epoch, int64_t step) {
  batch.ids = sampler_.step_ids(order, options_.rank, step);
  batch.step = step;
  batch.n = int(batch.ids.size());
  batch.wait_seconds = 0;
  const size_t bytes = info_.image_bytes();
  pixels_.resize(batch.ids.size() * bytes);
  batch.labels.resize(batch.ids.size());
  batch.images.resize(batch.ids.size() * bytes);
  shards_.read(batch.ids.data(), batch.ids.size(), pixels_.data(), batch.labels.data());
  if (options_.inspect_labels) read_inspect_labels(batch);
  for (size_t i = 0; i < batch.ids.size(); ++i) {
    AugmentParams params;
    if (options_.augment == AugmentKind::kCropFlip || options_.augment == AugmentKind::kCrop)
      params = augment_params(options_.seed, epoch, batch.ids[i], options_.augment_pad);
    else if (options_.augment == AugmentKind::kDihedral)
      params = dihedral_params(options_.seed, epoch, batch.ids[i]);
    // The same offsets with or without the flip: crop differs from true by the mirror alone.
    if (options_.augment == AugmentKind::kCrop) params.flip = false;
    transform_image(pixels_.data() + i * bytes, info_.channels, info_.height, info_.width, params,
                    normaliser_, batch.images.data() + i * bytes);
  }
}

void Loader::read_inspect_labels(Batch& batch) {
  const size_t n = batch.ids.size();
  batch.multi_hot.resize(n * defect_names_.size());
  batch.pass.resize(n);
  batch.zone_pass.resize(n * 4);
  shards_.read_extra("multi_hot", batch.ids.data(), n, batch.multi_hot.data());
  shards_.read_extra("pass", batch.ids.data(), n, batch.pass.data());
  shards_.read_extra("zone_pass", batch.ids.data(), n, batch.zone_pass.data());
}

}  // namespace ringtrain::data
