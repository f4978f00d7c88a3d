// shard_set.hpp — a split's shards, opened read-only, checked, read by global sample id.
//
// Reads touch only the rows asked for. A shard file that changes on disk while it is open
// (truncated, rewritten, replaced) is an error at the next read of it, not silent zeros.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/io/h5.hpp"

namespace ringtrain::data {

// What a split holds, from its shards' attributes.
struct DatasetInfo {
  std::string directory, dataset, split;
  int64_t samples = 0;
  int channels = 0, height = 0, width = 0;
  int classes = 0;
  std::vector<std::string> class_names;
  std::vector<float> mean, std;  // per channel, pixel/255 units, from the train split
  int shards = 0;

  size_t image_bytes() const { return size_t(channels) * height * width; }
};

// All shards <dir>/<split>-<i>-of-<K>.h5 of one split, open read-only. Sample g is row
// g - first_sample of the shard that holds it. Not thread-safe: one thread reads at a time.
class ShardSet {
 public:
  // HDF5's raw-data chunk cache for the whole split, shared out evenly over its shards'
  // /images. A row in a cached chunk costs no file read: 64 MiB holds all of
  // Fashion-MNIST's train pixels (shuffled rows/s measured 530k, against 300k with no
  // cache); HDF5's default is 1 MiB per dataset, 16 of rt-shard's 64 KiB chunks.
  static constexpr size_t kDefaultChunkCacheBytes = size_t(64) << 20;

  // Opens and checks every shard; any problem throws InputError naming the file (or the
  // directory and the pattern) and what to run to re-create the shards.
  static ShardSet open(const std::string& dir, const std::string& split,
                       size_t chunk_cache_bytes = kDefaultChunkCacheBytes);
  // Opens a split evaluated with a model built for `trained` (the train split): as open(),
  // then check_same_layout(trained, the split's info).
  static ShardSet open_matching(const DatasetInfo& trained, const std::string& dir,
                                const std::string& split,
                                size_t chunk_cache_bytes = kDefaultChunkCacheBytes);

  const DatasetInfo& info() const { return info_; }
  int64_t size() const { return info_.samples; }

  // Reads samples ids[0..n) (any order, repeats allowed) into images (n * C*H*W bytes, in
  // the order of ids) and labels (n). Only the requested rows are read: per shard, the ids
  // are sorted and each run of consecutive rows is one hyperslab read (h5.hpp says why not
  // one read over their union). Labels are read whole at open (4 bytes a sample) and
  // checked there: a label outside 0..classes-1 throws InputError naming the file and row.
  // After each shard's read the file is stat'ed against what it was at open: a change
  // throws InputError (HDF5 reads past the end of a truncated file as zeros, no error).
  void read(const int64_t* ids, size_t n, uint8_t* images, int32_t* labels);

  // Extra per-sample uint8 datasets (fiber shards: multi_hot, pass, zone_pass).
  bool has(const std::string& name) const;
  // Elements per sample of dataset name (product of its dims after the first).
  size_t row_elements(const std::string& name) const;
  // The `names` attribute of per-sample dataset name (multi_hot's column names); empty if none.
  std::vector<std::string> extra_names(const std::string& name) const;
  // Reads rows ids[0..n) of a uint8 per-sample dataset into out (n * row_elements(name)).
  void read_extra(const std::string& name, const int64_t* ids, size_t n, uint8_t* out);

 private:
  // What stat(2) says of a shard file; compared after every read of it.
  struct FileStamp {
    int error = 0;  // errno of a failed stat, else 0
    int64_t bytes = 0;
    uint64_t device = 0, inode = 0;
    int64_t mtime_ns = 0;
  };
  struct Shard {
    std::string path;
    h5::File file;
    h5::Dataset images;
    std::vector<int32_t> labels;
    int64_t first = 0, rows = 0;
    FileStamp stamp;  // at open
  };
  // One requested sample: its row in the shard and where the caller wants it.
  struct Request {
    int64_t row;
    size_t position;  // index into the caller's ids
  };
  ShardSet() = default;
  void add_shard(h5::File file, size_t chunk_cache_bytes);
  void group_by_shard(const int64_t* ids, size_t n);
  void unique_rows(const std::vector<Request>& requests);
  static FileStamp stamp_of(const std::string& path);
  static void check_unchanged(const Shard& shard);
  // Reads rows_ of shard s's dataset ds into scratch_; a read from a file that changed since
  // open throws check_unchanged's message, whatever HDF5 made of it.
  void read_rows_checked(size_t s, const h5::Dataset& ds, size_t row_bytes);

  DatasetInfo info_;
  std::vector<Shard> shards_;
  std::vector<std::vector<Request>> requests_;  // per shard, reused between reads
  std::vector<hsize_t> rows_;                   // unique rows of one shard
  std::vector<uint8_t> scratch_;
};

// What to run to re-create a split of the dataset (rt-shard ... or rt-fibergen ...).
std::string recreate_hint(const std::string& dataset, const std::string& dir);

// The split's shard files for a message: the file when there is one, else a glob
// (<dir>/val-*-of-00004.h5).
std::string split_files(const DatasetInfo& info);

// Throws InputError unless `split` (val, test) holds images of the channels, height and
// width of `trained` and the same classes (count, then names): a model built for one
// shape crashes or evaluates garbage on another. The message names both splits' files,
// the property and both values.
void check_same_layout(const DatasetInfo& trained, const DatasetInfo& split);

}  // namespace ringtrain::data
