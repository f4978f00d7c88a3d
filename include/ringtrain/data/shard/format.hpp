// format.hpp — the name, version, file names and keys of ringtrain's HDF5 dataset shards.
//
// A split (train, val, test) of a dataset is K shard files in one directory:
//   <dir>/<split>-<index:05>-of-<count:05>.h5
// Each holds consecutive samples of the split (row r of shard s is global sample
// first_sample + r), so the samples' order does not depend on the shard count.
//   /images  uint8 [N, C, H, W], chunked along N
//   /labels  int32 [N]
//   fiber only: /multi_hot uint8 [N, 5], /pass uint8 [N], /zone_pass uint8 [N, 4]
// Root attributes: the kAttr* keys below. mean and std are per channel, in units of
// pixel/255, over the train split.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ringtrain::data::shard {

constexpr const char* kFormatName = "ringtrain-shard";
constexpr int32_t kFormatVersion = 1;

constexpr const char* kAttrFormat = "format";                 // string, kFormatName
constexpr const char* kAttrFormatVersion = "format_version";  // int32
constexpr const char* kAttrDataset = "dataset";  // string: fiber, cifar10, fashion_mnist, ...
constexpr const char* kAttrSplit = "split";      // string: train, val, test
constexpr const char* kAttrClassNames = "class_names";      // string[classes]
constexpr const char* kAttrMean = "mean";                   // float[C]
constexpr const char* kAttrStd = "std";                     // float[C]
constexpr const char* kAttrShardIndex = "shard_index";      // int32
constexpr const char* kAttrShardCount = "shard_count";      // int32
constexpr const char* kAttrFirstSample = "first_sample";    // int64, global index of row 0
constexpr const char* kAttrSplitSamples = "split_samples";  // int64, samples in the whole split

constexpr const char* kImages = "images";
constexpr const char* kLabels = "labels";

inline std::string file_name(const std::string& split, int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d.h5", split.c_str(), index, count);
  return buf;
}

}  // namespace ringtrain::data::shard
