// convert.hpp — CIFAR-10 binary and IDX (MNIST, Fashion-MNIST) readers and converters.
//
// What bin/rt-shard runs.
//
// Every reader validates its whole input before anything is written and throws
// ringtrain::InputError with one line naming the file and the record (0-based), e.g.
//   cifar/data_batch_3.bin: record 9999 is truncated (2011 of 3073 bytes)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/data/shard/writer.hpp"

namespace ringtrain::data::shard {

// ---- CIFAR-10 -------------------------------------------------------------------------

constexpr int kCifarSide = 32;
constexpr int kCifarRecordBytes = 1 + 3 * kCifarSide * kCifarSide;  // label, R, G, B planes
const std::vector<std::string>& cifar10_class_names();              // airplane .. truck

// Appends the records of one CIFAR-10 binary batch file to `into` (file order kept).
void read_cifar_batch(const std::string& path, SplitImages& into);

struct CifarOptions {
  std::string input_dir;  // holds data_batch_1..5.bin and test_batch.bin
  std::string output_dir;
  int shards = 1;
  int64_t val_count = 0;  // the last val_count train records become the val split
};
// data_batch_1..5.bin -> train (and val), test_batch.bin -> test. Returns the files written.
std::vector<std::string> convert_cifar10(const CifarOptions& options);

// ---- IDX (MNIST, Fashion-MNIST) -------------------------------------------------------

constexpr uint32_t kIdxImagesMagic = 0x00000803;              // unsigned bytes, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;              // unsigned bytes, 1 dimension
const std::vector<std::string>& fashion_mnist_class_names();  // T-shirt/top .. Ankle boot
// The class names rt-shard uses for a dataset name when none are given: fashion_mnist,
// mnist ("0".."9"); empty for any other name.
std::vector<std::string> default_class_names(const std::string& dataset);

// Reads an IDX image file and its label file (plain or gzip) into a split with C = 1,
// checking magic numbers, sizes, the counts against each other and labels < classes.
SplitImages read_idx(const std::string& images_path, const std::string& labels_path,
                     const std::string& dataset, const std::vector<std::string>& class_names,
                     const std::string& split);

struct IdxOptions {
  std::string images, labels, output_dir;
  std::string split = "train";  // train, val or test
  int shards = 1;
  std::string dataset = "mnist";
  std::vector<std::string> class_names;  // empty: default_class_names(dataset)
  int64_t val_count = 0;                 // train only: hold out the last val_count as val
  std::vector<float> mean, std;          // given: stored as is (stats_from "options")
};
// Writes one split (plus val when val_count > 0). Mean and std: given ones, else computed
// over the train part, or for a val/test split over the split itself (stats_from says so).
std::vector<std::string> convert_idx(const IdxOptions& options);

// Debian's dataset-fashion-mnist files.
constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";
struct FashionMnistOptions {
  std::string input_dir =
      kDebianFashionMnistDir;  // {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
  std::string output_dir;
  int shards = 1;
  int64_t val_count = 5000;  // held out from the end of train
};
// train -> train + val, t10k -> test, all normalised with the train part's statistics.
std::vector<std::string> convert_fashion_mnist(const FashionMnistOptions& options);

}  // namespace ringtrain::data::shard
