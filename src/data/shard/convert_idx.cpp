// convert_idx.cpp — IDX files (plain or gzip, via zlib) into shards; Debian's Fashion-MNIST.
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/convert.hpp"

namespace ringtrain::data::shard {
namespace fs = std::filesystem;

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
  return names;
}

std::vector<std::string> default_class_names(const std::string& dataset) {
  if (dataset == "fashion_mnist") return fashion_mnist_class_names();
  if (dataset == "mnist") return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  return {};
}

namespace {

// An IDX file opened through zlib, which reads plain files as they are.
class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path), gz_(gzopen(path.c_str(), "rb")) {
    RT_REQUIRE_INPUT(gz_, path, ": cannot open (", errno ? std::strerror(errno) : "out of memory",
                     ")");
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;
  ~IdxFile() { gzclose(gz_); }

  // Reads up to n bytes; returns how many there were (fewer only at the end of the file).
  size_t read(void* out, size_t n) {
    size_t total = 0;
    while (total < n) {
      const unsigned want = unsigned(std::min<size_t>(n - total, 1u << 30));
      const int got = gzread(gz_, static_cast<char*>(out) + total, want);
      if (got < 0) {
        int code = 0;
        const char* why = gzerror(gz_, &code);
        throw InputError(str(path_, ": cannot read (", why, ")"));
      }
      if (got == 0) break;
      total += size_t(got);
    }
    return total;
  }

  // Reads the magic number and the big-endian dimensions that follow it.
  std::vector<uint32_t> header(uint32_t expected_magic, const char* what) {
    uint8_t magic[4];
    const size_t got = read(magic, 4);
    RT_REQUIRE_INPUT(got == 4, path_, ": header is truncated (", got, " of 4 magic bytes)");
    const uint32_t found = big_endian(magic);
    char hex[2][16];
    std::snprintf(hex[0], sizeof hex[0], "0x%08x", found);
    std::snprintf(hex[1], sizeof hex[1], "0x%08x", expected_magic);
    RT_REQUIRE_INPUT(found == expected_magic, path_, ": wrong IDX magic ", hex[0], ", expected ",
                     hex[1], " (", what, ")");
    std::vector<uint32_t> dims(expected_magic & 0xff);
    for (uint32_t& d : dims) {
      uint8_t raw[4];
      const size_t n = read(raw, 4);
      RT_REQUIRE_INPUT(n == 4, path_, ": header is truncated (dimensions missing)");
      d = big_endian(raw);
      RT_REQUIRE_INPUT(d > 0, path_, ": header declares a dimension of 0");
    }
    return dims;
  }

  // Reads count records of record_bytes each; a short file names the record it stops in.
  std::vector<uint8_t> records(uint32_t count, size_t record_bytes) {
    std::vector<uint8_t> data(size_t(count) * record_bytes);
    const size_t got = read(data.data(), data.size());
    if (got < data.size()) {
      const size_t record = got / record_bytes, partial = got % record_bytes;
      RT_REQUIRE_INPUT(partial == 0, path_, ": record ", record, " is truncated (", partial, " of ",
                       record_bytes, " bytes)");
      throw InputError(str(path_, ": holds only ", record, " of the ", count,
                           " records its header declares (truncated)"));
    }
    uint8_t extra;
    RT_REQUIRE_INPUT(read(&extra, 1) == 0, path_, ": has data past its last record ", count - 1,
                     " (its header declares ", count, " records)");
    return data;
  }

 private:
  static uint32_t big_endian(const uint8_t* b) {
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
  }
  std::string path_;
  gzFile gz_;
};

}  // namespace

SplitImages read_idx(const std::string& images_path, const std::string& labels_path,
                     const std::string& dataset, const std::vector<std::string>& class_names,
                     const std::string& split) {
  RT_REQUIRE_INPUT(!class_names.empty(), "dataset ", dataset,
                   ": no default class names; pass --class-names a,b,...");
  SplitImages out;
  out.dataset = dataset;
  out.split = split;
  out.class_names = class_names;
  out.channels = 1;

  IdxFile images(images_path), labels(labels_path);
  const auto image_dims = images.header(kIdxImagesMagic, "unsigned-byte images, 3 dimensions");
  const auto label_dims = labels.header(kIdxLabelsMagic, "unsigned-byte labels, 1 dimension");
  RT_REQUIRE_INPUT(image_dims[0] == label_dims[0], labels_path, ": holds ", label_dims[0],
                   " labels but ", images_path, " holds ", image_dims[0], " images");
  out.height = int(image_dims[1]);
  out.width = int(image_dims[2]);
  out.images = images.records(image_dims[0], out.image_bytes());
  const std::vector<uint8_t> raw_labels = labels.records(label_dims[0], 1);
  const int classes = int(class_names.size());
  out.labels.reserve(raw_labels.size());
  for (size_t r = 0; r < raw_labels.size(); ++r) {
    RT_REQUIRE_INPUT(raw_labels[r] < classes, labels_path, ": record ", r, " has label ",
                     int(raw_labels[r]), ", outside 0..", classes - 1, " (", classes, " classes)");
    out.labels.push_back(raw_labels[r]);
  }
  return out;
}

namespace {

void set_stats(SplitImages& split, const std::vector<float>& mean, const std::vector<float>& std,
               const std::string& from) {
  split.mean = mean;
  split.std = std;
  split.stats_from = from;
}

void compute_stats(SplitImages& split, const std::string& from) {
  channel_stats(split.images.data(), split.samples(), split.channels, split.height * split.width,
                split.mean, split.std);
  split.stats_from = from;
}

}  // namespace

std::vector<std::string> convert_idx(const IdxOptions& options) {
  RT_REQUIRE_INPUT(options.split == "train" || options.split == "val" || options.split == "test",
                   "--split ", options.split, ": use train, val or test");
  RT_REQUIRE_INPUT(options.val_count == 0 || options.split == "train", "--val-count ",
                   options.val_count, ": only a train split can hold out a val split");
  RT_REQUIRE_INPUT(options.mean.size() == options.std.size() &&
                       (options.mean.empty() || options.mean.size() == 1),
                   "--mean/--std: give one value each (IDX images have 1 channel)");
  OutputDirectory output(options.output_dir, "--output");
  const auto names =
      options.class_names.empty() ? default_class_names(options.dataset) : options.class_names;
  SplitImages all = read_idx(options.images, options.labels, options.dataset, names, options.split);

  const int64_t n = all.samples();
  RT_REQUIRE_INPUT(options.val_count >= 0 && options.val_count < n, "--val-count ",
                   options.val_count, ": must be between 0 and ", n - 1, " (the records read)");
  SplitImages main = options.val_count ? slice_split(all, 0, n - options.val_count, options.split)
                                       : std::move(all);
  if (!options.mean.empty())
    set_stats(main, options.mean, options.std, "options");
  else
    compute_stats(main, options.split);
  std::vector<const SplitImages*> splits{&main};
  SplitImages val;
  if (options.val_count > 0) {
    val = slice_split(all, n - options.val_count, options.val_count, "val");
    set_stats(val, main.mean, main.std, main.stats_from);
    splits.push_back(&val);
  }
  auto written = write_splits(options.output_dir, splits, options.shards);
  output.keep();
  return written;
}

std::vector<std::string> convert_fashion_mnist(const FashionMnistOptions& options) {
  OutputDirectory output(options.output_dir, "--output");
  const fs::path in(options.input_dir);
  const auto& names = fashion_mnist_class_names();
  SplitImages all =
      read_idx((in / "train-images-idx3-ubyte.gz").string(),
               (in / "train-labels-idx1-ubyte.gz").string(), "fashion_mnist", names, "train");
  SplitImages test =
      read_idx((in / "t10k-images-idx3-ubyte.gz").string(),
               (in / "t10k-labels-idx1-ubyte.gz").string(), "fashion_mnist", names, "test");
  const int64_t n = all.samples();
  RT_REQUIRE_INPUT(options.val_count >= 0 && options.val_count < n, "--val-count ",
                   options.val_count, ": must be between 0 and ", n - 1, " (the train records)");
  SplitImages train = slice_split(all, 0, n - options.val_count, "train");
  compute_stats(train, "train");
  set_stats(test, train.mean, train.std, "train");
  std::vector<const SplitImages*> splits{&train, &test};
  SplitImages val;
  if (options.val_count > 0) {
    val = slice_split(all, n - options.val_count, options.val_count, "val");
    set_stats(val, train.mean, train.std, "train");
    splits.push_back(&val);
  }
  auto written = write_splits(options.output_dir, splits, options.shards);
  output.keep();
  return written;
}

}  // namespace ringtrain::data::shard
