// convert_cifar.cpp — CIFAR-10 binary batches (1 label byte + R, G, B planes) into shards.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/convert.hpp"

namespace ringtrain::data::shard {
namespace fs = std::filesystem;

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names{"airplane", "automobile", "bird",  "cat",  "deer",
                                              "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  RT_REQUIRE_INPUT(f, path, ": cannot open (", std::strerror(errno), ")");
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
  const bool failed = std::ferror(f);
  std::fclose(f);
  RT_REQUIRE_INPUT(!failed, path, ": cannot read (", std::strerror(errno), ")");
  return bytes;
}

SplitImages empty_cifar_split(const std::string& split) {
  SplitImages out;
  out.dataset = "cifar10";
  out.split = split;
  out.channels = 3;
  out.height = out.width = kCifarSide;
  out.class_names = cifar10_class_names();
  return out;
}

}  // namespace

void read_cifar_batch(const std::string& path, SplitImages& into) {
  const std::vector<uint8_t> bytes = read_file(path);
  const size_t records = bytes.size() / kCifarRecordBytes;
  const size_t tail = bytes.size() % kCifarRecordBytes;
  RT_REQUIRE_INPUT(!bytes.empty(), path, ": is empty (no records)");
  RT_REQUIRE_INPUT(tail == 0, path, ": record ", records, " is truncated (", tail, " of ",
                   kCifarRecordBytes, " bytes)");
  const int classes = int(cifar10_class_names().size());
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* record = bytes.data() + r * kCifarRecordBytes;
    RT_REQUIRE_INPUT(record[0] < classes, path, ": record ", r, " has label ", int(record[0]),
                     ", outside 0..", classes - 1, " (", classes, " classes)");
    into.labels.push_back(record[0]);
    into.images.insert(into.images.end(), record + 1, record + kCifarRecordBytes);
  }
}

std::vector<std::string> convert_cifar10(const CifarOptions& options) {
  OutputDirectory output(options.output_dir, "--output");
  const fs::path in(options.input_dir);
  SplitImages all_train = empty_cifar_split("train"), test = empty_cifar_split("test");
  for (int b = 1; b <= 5; ++b)
    read_cifar_batch((in / ("data_batch_" + std::to_string(b) + ".bin")).string(), all_train);
  read_cifar_batch((in / "test_batch.bin").string(), test);

  const int64_t n = all_train.samples();
  RT_REQUIRE_INPUT(options.val_count >= 0 && options.val_count < n, "--val-count ",
                   options.val_count, ": must be between 0 and ", n - 1,
                   " (the train records read)");
  SplitImages train = slice_split(all_train, 0, n - options.val_count, "train");
  channel_stats(train.images.data(), train.samples(), 3, kCifarSide * kCifarSide, train.mean,
                train.std);
  train.stats_from = "train";
  test.mean = train.mean;
  test.std = train.std;
  test.stats_from = "train";
  std::vector<const SplitImages*> splits{&train, &test};
  SplitImages val;
  if (options.val_count > 0) {
    val = slice_split(all_train, n - options.val_count, options.val_count, "val");
    val.mean = train.mean;
    val.std = train.std;
    val.stats_from = "train";
    splits.push_back(&val);
  }
  auto written = write_splits(options.output_dir, splits, options.shards);
  output.keep();
  return written;
}

}  // namespace ringtrain::data::shard
