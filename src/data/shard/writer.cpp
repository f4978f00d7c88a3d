// writer.cpp — channel statistics and the all-or-nothing shard writer.
#include "ringtrain/data/shard/writer.hpp"

#include <cmath>
#include <filesystem>
#include <memory>
#include <regex>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/format.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::data::shard {
namespace fs = std::filesystem;

void channel_stats(const uint8_t* images, int64_t n, int channels, int pixels_per_channel,
                   std::vector<float>& mean, std::vector<float>& std) {
  std::vector<uint64_t> sum(channels, 0), sum_sq(channels, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < channels; ++c) {
      const uint8_t* p = images + (i * channels + c) * int64_t(pixels_per_channel);
      uint64_t s = 0, q = 0;
      for (int k = 0; k < pixels_per_channel; ++k) {
        s += p[k];
        q += uint32_t(p[k]) * p[k];
      }
      sum[c] += s;
      sum_sq[c] += q;
    }
  }
  mean.assign(channels, 0.f);
  std.assign(channels, 0.f);
  const double count = double(n) * pixels_per_channel;
  if (count == 0) return;
  for (int c = 0; c < channels; ++c) {
    double m = double(sum[c]) / count;
    double var = double(sum_sq[c]) / count - m * m;
    mean[c] = float(m / 255.0);
    std[c] = float(std::sqrt(std::max(var, 0.0)) / 255.0);
  }
}

SplitImages slice_split(const SplitImages& split, int64_t first, int64_t count,
                        const std::string& name) {
  RT_CHECK(first >= 0 && count >= 0 && first + count <= split.samples(), "slice ", first, "+",
           count, " of a split of ", split.samples());
  SplitImages out;
  out.dataset = split.dataset;
  out.split = name;
  out.channels = split.channels;
  out.height = split.height;
  out.width = split.width;
  out.class_names = split.class_names;
  out.mean = split.mean;
  out.std = split.std;
  out.stats_from = split.stats_from;
  const size_t bytes = split.image_bytes();
  out.images.assign(split.images.begin() + first * bytes,
                    split.images.begin() + (first + count) * bytes);
  out.labels.assign(split.labels.begin() + first, split.labels.begin() + first + count);
  return out;
}

int64_t default_chunk_rows(size_t image_bytes) {
  return std::max<int64_t>(1, int64_t((64 << 10) / std::max<size_t>(image_bytes, 1)));
}

namespace {

void write_shard(h5::Group& root, const SplitImages& split, int index, int count) {
  const int64_t n = split.samples();
  const int64_t first = n * index / count, rows = n * (index + 1) / count - first;
  const size_t bytes = split.image_bytes();
  root.set_attr(kAttrFormat, kFormatName);
  root.set_attr(kAttrFormatVersion, kFormatVersion);
  root.set_attr(kAttrDataset, split.dataset);
  root.set_attr(kAttrSplit, split.split);
  root.set_attr(kAttrClassNames, split.class_names);
  root.set_attr(kAttrMean, split.mean);
  root.set_attr(kAttrStd, split.std);
  root.set_attr(kAttrShardIndex, int32_t(index));
  root.set_attr(kAttrShardCount, int32_t(count));
  root.set_attr(kAttrFirstSample, int64_t(first));
  root.set_attr(kAttrSplitSamples, int64_t(n));
  if (!split.stats_from.empty()) root.set_attr("stats_from", split.stats_from);
  const h5::Dims shape{hsize_t(rows), hsize_t(split.channels), hsize_t(split.height),
                       hsize_t(split.width)};
  root.write<uint8_t>(kImages, shape, split.images.data() + first * bytes,
                      hsize_t(default_chunk_rows(bytes)));
  root.write<int32_t>(kLabels, h5::Dims{hsize_t(rows)}, split.labels.data() + first);
}

// Removes <split>-*-of-*.h5 files in dir whose shard count is not `count`.
void remove_stale_shards(const std::string& dir, const std::string& split, int count) {
  const std::regex pattern(split + R"(-\d{5}-of-(\d{5})\.h5)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern) && std::stoi(m[1].str()) != count)
      fs::remove(entry.path());
  }
}

}  // namespace

OutputDirectory::OutputDirectory(const std::string& dir, const std::string& option) {
  fs::path missing = fs::path(dir).lexically_normal();
  if (missing.filename().empty()) missing = missing.parent_path();  // "out/" -> "out"
  std::error_code ec;
  for (; !missing.empty() && !fs::exists(missing, ec); missing = missing.parent_path())
    created_.push_back(missing.string());
  try {
    h5::require_writable_dir(dir, option);
  } catch (...) {
    remove_created();  // the destructor of a half-built object does not run
    throw;
  }
}

OutputDirectory::~OutputDirectory() {
  remove_created();
}

void OutputDirectory::remove_created() noexcept {
  std::error_code ec;  // not empty (someone else's files) or gone: leave it be
  for (const std::string& path : created_) fs::remove(path, ec);
  created_.clear();
}

std::vector<std::string> write_splits(const std::string& dir,
                                      const std::vector<const SplitImages*>& splits, int shards) {
  for (const SplitImages* split : splits) {
    RT_REQUIRE_INPUT(shards >= 1 && shards <= split->samples(), "--shards ", shards,
                     ": must be between 1 and the ", split->samples(), " samples of split ",
                     split->split);
  }
  std::vector<std::unique_ptr<h5::AtomicFile>> files;
  std::vector<std::string> paths;
  for (const SplitImages* split : splits) {
    for (int i = 0; i < shards; ++i) {
      paths.push_back((fs::path(dir) / file_name(split->split, i, shards)).string());
      files.push_back(std::make_unique<h5::AtomicFile>(paths.back()));
      write_shard(files.back()->root(), *split, i, shards);
    }
  }
  // Commit renames one file at a time; if one fails, take back the ones already in place.
  size_t committed = 0;
  try {
    for (; committed < files.size(); ++committed) files[committed]->commit();
  } catch (...) {
    for (size_t i = 0; i < committed; ++i) std::remove(paths[i].c_str());
    throw;
  }
  for (const SplitImages* split : splits) remove_stale_shards(dir, split->split, shards);
  return paths;
}

void require_split_fractions(double val_fraction, double test_fraction) {
  RT_REQUIRE_INPUT(val_fraction >= 0 && val_fraction < 1, "--val-fraction ", val_fraction,
                   ": must be in [0, 1)");
  RT_REQUIRE_INPUT(test_fraction >= 0 && test_fraction < 1, "--test-fraction ", test_fraction,
                   ": must be in [0, 1)");
}

}  // namespace ringtrain::data::shard
