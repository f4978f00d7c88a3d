// writer.hpp — in-memory splits, their channel statistics, the all-or-nothing writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::data::shard {

// One split of a dataset held in memory, ready to be written as shards.
struct SplitImages {
  std::string dataset;  // cifar10, fashion_mnist, mnist, ...
  std::string split;    // train, val, test
  int channels = 0, height = 0, width = 0;
  std::vector<std::string> class_names;
  std::vector<float> mean, std;  // per channel, pixel/255 units
  std::string stats_from;        // where mean and std come from: "train", "options", "test"
  std::vector<uint8_t> images;   // [N, C, H, W]
  std::vector<int32_t> labels;   // [N]

  int64_t samples() const { return int64_t(labels.size()); }
  size_t image_bytes() const { return size_t(channels) * height * width; }
};

// Per-channel mean and (population) std of images [n, C, H*W], in pixel/255 units. Sums are
// exact integers, so the result does not depend on the order of the samples.
void channel_stats(const uint8_t* images, int64_t n, int channels, int pixels_per_channel,
                   std::vector<float>& mean, std::vector<float>& std);

// Returns rows [first, first + count) of split as a new split named name (same metadata).
SplitImages slice_split(const SplitImages& split, int64_t first, int64_t count,
                        const std::string& name);

// Rows per HDF5 chunk along N: about 64 KiB of pixels, so a random row costs one small chunk.
int64_t default_chunk_rows(size_t image_bytes);

// The tools' --val-fraction and --test-fraction: each in [0, 1), an InputError naming the
// option otherwise.
void require_split_fractions(double val_fraction, double test_fraction);

// A conversion's output directory, created (with any missing parents) and checked writable
// up front; unless keep() is called, the destructor removes again the directories it
// created, deepest first and only when empty, so a failed conversion leaves no empty
// directory behind. A directory that existed before is never removed.
class OutputDirectory {
 public:
  // Throws InputError naming `option` (--output) and dir when it cannot be created or written.
  OutputDirectory(const std::string& dir, const std::string& option);
  ~OutputDirectory();
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;
  void keep() { created_.clear(); }

 private:
  void remove_created() noexcept;
  std::vector<std::string> created_;  // deepest first
};

// Writes every split as `shards` files <dir>/<split>-<i>-of-<shards>.h5 (format.hpp).
// Each file goes to a temp file first; only when all are written are they renamed into
// place, so a failure leaves no new shard file behind. Afterwards, shards of the same
// splits from an earlier conversion with another shard count are removed.
// Returns the paths written.
std::vector<std::string> write_splits(const std::string& dir,
                                      const std::vector<const SplitImages*>& splits, int shards);

}  // namespace ringtrain::data::shard
