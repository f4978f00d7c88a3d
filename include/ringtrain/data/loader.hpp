// loader.hpp — the prefetching data loader: batches read, augmented, normalised ahead.
//
// A background thread reads this rank's batches (sampler.hpp) from the shards and queues
// them, up to prefetch_batches ahead of the consumer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/data/sampler.hpp"
#include "ringtrain/data/shard_set.hpp"

namespace ringtrain::data {

struct LoaderOptions {
  int batch_per_rank = 128;
  bool shuffle = true;
  AugmentKind augment = AugmentKind::kNone;  // kCropFlip, kCrop: crop with augment_pad padding
  int augment_pad = 4;
  int prefetch_batches = 4;  // queue bound
  uint64_t seed = 0;
  Remainder remainder = Remainder::kDrop;  // kAll for evaluation
  int rank = 0, world_size = 1;
  int64_t max_samples = 0;      // > 0: only the split's first max_samples samples (weak scaling)
  int accumulate_steps = 1;     // micro-steps per optimizer step: epochs hold whole groups of them
  bool inspect_labels = false;  // also read multi_hot, pass and zone_pass (fiber shards)
};

struct Batch {
  int64_t step = 0;
  int n = 0;                    // samples in this batch (the last one may be short under kAll)
  std::vector<float> images;    // n * C*H*W, (x/255 - mean[c]) / std[c]
  std::vector<int32_t> labels;  // n
  std::vector<int64_t> ids;     // n global sample ids
  // With inspect_labels (else empty): n * defects, n and n * 4 labels, 1 = present / pass.
  std::vector<uint8_t> multi_hot, pass, zone_pass;
  double wait_seconds = 0;  // how long next() waited for this batch
};

class Loader {
 public:
  // Takes the split's shards; the background thread starts idle until start_epoch().
  Loader(ShardSet shards, const LoaderOptions& options);
  ~Loader();  // stops and joins the thread; never throws
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts producing epoch's batches, abandoning whatever is left of the previous epoch.
  void start_epoch(int epoch);
  // The epoch's next batch (waiting for it if needed); false after the last step. An error
  // in the reader thread (a bad shard, a shard file changed on disk) is rethrown here.
  bool next(Batch& batch);

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(options_.rank); }
  int64_t samples_per_epoch() const { return sampler_.rank_samples(options_.rank); }
  const DatasetInfo& info() const { return info_; }
  const Sampler& sampler() const { return sampler_; }
  const LoaderOptions& options() const { return options_; }
  // With inspect_labels: the names of the multi_hot columns (the shards' multi_hot `names`).
  const std::vector<std::string>& defect_names() const { return defect_names_; }

 private:
  void run();
  void produce_epoch(uint64_t generation, int epoch);
  void fill(Batch& batch, const std::vector<int64_t>& order, int epoch, int64_t step);
  void read_inspect_labels(Batch& batch);

  ShardSet shards_;
  DatasetInfo info_;
  LoaderOptions options_;
  Sampler sampler_;
  Normaliser normaliser_;
  std::vector<uint8_t> pixels_;  // the reader thread's raw batch
  std::vector<std::string> defect_names_;

  std::mutex mutex_;
  std::condition_variable to_reader_, to_consumer_;
  std::deque<Batch> queue_;
  std::vector<Batch> recycled_;  // buffers handed back by next(), reused by the reader
  std::exception_ptr error_;
  uint64_t generation_ = 0;  // bumped by start_epoch; stale work is dropped
  int epoch_ = -1;
  bool epoch_started_ = false, epoch_done_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace ringtrain::data
