// test_shard.cpp — rt-shard round trips and corrupt inputs; ShardSet reads and errors.
//
// Conversions (CIFAR-10 binary, IDX plain and gzip) round trip exactly, every corrupt input
// fails with its exact one-line message and leaves no file (nor a directory it created), and
// ShardSet rejects malformed shards, non-finite statistics, empty splits and splits unlike the
// train split, naming the files and what to run, and fails a read of a file changed since open.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/convert.hpp"
#include "ringtrain/data/shard/format.hpp"
#include "ringtrain/data/shard_set.hpp"
#include "ringtrain/io/h5.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ringtrain;

namespace {

using rt_test::temp_dir;

bool empty_dir(const std::string& dir) {
  return !fs::exists(dir) || fs::is_empty(dir);
}

// Position-dependent CIFAR pixel of record r in batch file b: channel, row and column all
// change the value, so a swapped plane or a transposed image cannot pass.
uint8_t cifar_pixel(int b, int r, int c, int y, int x) {
  return uint8_t((b * 13 + r * 31 + c * 101 + y * 7 + x * 3) % 256);
}
int cifar_label(int b, int r) {
  return (b * 3 + r * 7) % 10;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> cifar_batch(int b, int records) {
  std::vector<uint8_t> bytes;
  for (int r = 0; r < records; ++r) {
    bytes.push_back(uint8_t(cifar_label(b, r)));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) bytes.push_back(cifar_pixel(b, r, c, y, x));
  }
  return bytes;
}

// Batch files 1..5 hold 4 records each, test_batch.bin (b = 6) holds 5.
std::string write_cifar_input(const std::string& name) {
  const std::string dir = temp_dir(name);
  for (int b = 1; b <= 5; ++b)
    write_bytes(dir + "/data_batch_" + std::to_string(b) + ".bin", cifar_batch(b, 4));
  write_bytes(dir + "/test_batch.bin", cifar_batch(6, 5));
  return dir;
}

// IDX files of `count` 5x4 images (not square: rows and columns cannot be swapped).
constexpr int kIdxRows = 5, kIdxCols = 4;
uint8_t idx_pixel(int r, int y, int x) {
  return uint8_t((r * 37 + y * 11 + x * 5 + 3) % 256);
}
int idx_label(int r) {
  return (r * 3) % 10;
}

std::vector<uint8_t> big_endian(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

std::vector<uint8_t> idx_images(int declared, int count) {
  std::vector<uint8_t> bytes = big_endian(data::shard::kIdxImagesMagic);
  for (uint32_t d : {uint32_t(declared), uint32_t(kIdxRows), uint32_t(kIdxCols)}) {
    auto b = big_endian(d);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  for (int r = 0; r < count; ++r)
    for (int y = 0; y < kIdxRows; ++y)
      for (int x = 0; x < kIdxCols; ++x) bytes.push_back(idx_pixel(r, y, x));
  return bytes;
}

std::vector<uint8_t> idx_labels(int declared, int count) {
  std::vector<uint8_t> bytes = big_endian(data::shard::kIdxLabelsMagic);
  auto b = big_endian(uint32_t(declared));
  bytes.insert(bytes.end(), b.begin(), b.end());
  for (int r = 0; r < count; ++r) bytes.push_back(uint8_t(idx_label(r)));
  return bytes;
}

void write_maybe_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  if (path.size() < 3 || path.substr(path.size() - 3) != ".gz") return write_bytes(path, bytes);
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, bytes.data(), unsigned(bytes.size()));
  gzclose(gz);
}

// Runs fn, expecting InputError with exactly `message`.
template <typename Fn>
void expect_input_error(Fn&& fn, const std::string& message) {
  try {
    fn();
    BOOST_ERROR("no error; expected: " << message);
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == message);
  }
}

// Reference per-channel statistics, two-pass in double.
void reference_stats(const std::vector<std::vector<uint8_t>>& channels, std::vector<double>& mean,
                     std::vector<double>& std) {
  for (const auto& values : channels) {
    double m = 0, v = 0;
    for (uint8_t p : values) m += p / 255.0;
    m /= values.size();
    for (uint8_t p : values) v += (p / 255.0 - m) * (p / 255.0 - m);
    mean.push_back(m);
    std.push_back(std::sqrt(v / values.size()));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rt_shard)

BOOST_AUTO_TEST_CASE(cifar10_round_trip_keeps_pixels_labels_and_channel_order) {
  const std::string in = write_cifar_input("cifar-in"), out = temp_dir("cifar-out");
  data::shard::CifarOptions o{in, out, 3, 4};  // 20 train records: 16 train, 4 val; 5 test
  const auto written = data::shard::convert_cifar10(o);
  BOOST_TEST(written.size() == 9u);

  // Expected split contents, in file order.
  struct Rec {
    int b, r;
  };
  std::vector<Rec> train, val, test;
  for (int b = 1; b <= 5; ++b)
    for (int r = 0; r < 4; ++r) (train.size() < 16 ? train : val).push_back({b, r});
  for (int r = 0; r < 5; ++r) test.push_back({6, r});

  std::vector<std::vector<uint8_t>> planes(3);
  for (const Rec& rec : train)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) planes[c].push_back(cifar_pixel(rec.b, rec.r, c, y, x));
  std::vector<double> mean, std;
  reference_stats(planes, mean, std);

  for (const auto& [split, recs] : {std::pair{"train", train}, {"val", val}, {"test", test}}) {
    BOOST_TEST_CONTEXT("split " << split) {
      auto set = data::ShardSet::open(out, split);
      const auto& info = set.info();
      BOOST_TEST(info.dataset == "cifar10");
      BOOST_TEST(info.samples == int64_t(recs.size()));
      BOOST_TEST((info.channels == 3 && info.height == 32 && info.width == 32));
      BOOST_TEST(info.class_names == data::shard::cifar10_class_names());
      BOOST_TEST(info.class_names.front() == "airplane");
      BOOST_TEST(info.class_names.back() == "truck");
      BOOST_TEST(info.shards == 3);
      for (int c = 0; c < 3; ++c) {
        BOOST_TEST(info.mean[c] == mean[c], boost::test_tools::tolerance(1e-6));
        BOOST_TEST(info.std[c] == std[c], boost::test_tools::tolerance(1e-6));
      }
      std::vector<int64_t> ids(recs.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
      std::vector<uint8_t> images(ids.size() * 3072);
      std::vector<int32_t> labels(ids.size());
      set.read(ids.data(), ids.size(), images.data(), labels.data());
      size_t wrong = 0;
      for (size_t i = 0; i < recs.size(); ++i) {
        if (labels[i] != cifar_label(recs[i].b, recs[i].r)) ++wrong;
        for (int c = 0; c < 3; ++c)
          for (int y = 0; y < 32; ++y)
            for (int x = 0; x < 32; ++x)
              if (images[i * 3072 + (c * 32 + y) * 32 + x] !=
                  cifar_pixel(recs[i].b, recs[i].r, c, y, x))
                ++wrong;
      }
      BOOST_TEST(wrong == 0u);
    }
  }
  // The attributes of one shard, as h5dump shows them.
  auto file = h5::File::open_read(out + "/val-00001-of-00003.h5");
  const auto& root = file.root();
  BOOST_TEST(root.attr_string(data::shard::kAttrFormat) == "ringtrain-shard");
  BOOST_TEST(root.attr<int32_t>(data::shard::kAttrFormatVersion) == 1);
  BOOST_TEST(root.attr_string(data::shard::kAttrSplit) == "val");
  BOOST_TEST(root.attr<int32_t>(data::shard::kAttrShardIndex) == 1);
  BOOST_TEST(root.attr<int32_t>(data::shard::kAttrShardCount) == 3);
  BOOST_TEST(root.attr<int64_t>(data::shard::kAttrFirstSample) == 1);  // 4 rows: 1, 1, 2
  BOOST_TEST(root.attr<int64_t>(data::shard::kAttrSplitSamples) == 4);
  BOOST_TEST(root.attr_string("stats_from") == "train");
  BOOST_TEST((root.open_dataset(data::shard::kImages).dims() == h5::Dims{1, 3, 32, 32}));
}

BOOST_AUTO_TEST_CASE(idx_round_trip_plain_and_gzip) {
  for (const std::string suffix : {"", ".gz"}) {
    BOOST_TEST_CONTEXT("suffix '" << suffix << "'") {
      const std::string in = temp_dir("idx-in"), out = temp_dir("idx-out");
      const std::string images = in + "/img" + suffix, labels = in + "/lab" + suffix;
      write_maybe_gz(images, idx_images(7, 7));
      write_maybe_gz(labels, idx_labels(7, 7));
      data::shard::IdxOptions o;
      o.images = images;
      o.labels = labels;
      o.output_dir = out;
      o.shards = 2;
      o.dataset = "fashion_mnist";
      o.val_count = 2;
      data::shard::convert_idx(o);

      auto train = data::ShardSet::open(out, "train");
      auto val = data::ShardSet::open(out, "val");
      BOOST_TEST(train.info().class_names == data::shard::fashion_mnist_class_names());
      BOOST_TEST(train.info().class_names[0] == "T-shirt/top");
      BOOST_TEST((train.info().channels == 1 && train.info().height == kIdxRows &&
                  train.info().width == kIdxCols));
      BOOST_TEST(train.size() == 5);
      BOOST_TEST(val.size() == 2);
      std::vector<std::vector<uint8_t>> plane(1);
      for (int r = 0; r < 5; ++r)
        for (int y = 0; y < kIdxRows; ++y)
          for (int x = 0; x < kIdxCols; ++x) plane[0].push_back(idx_pixel(r, y, x));
      std::vector<double> mean, std;
      reference_stats(plane, mean, std);
      BOOST_TEST(train.info().mean[0] == mean[0], boost::test_tools::tolerance(1e-6));
      BOOST_TEST(train.info().std[0] == std[0], boost::test_tools::tolerance(1e-6));
      BOOST_TEST(val.info().mean == train.info().mean);

      size_t wrong = 0;
      for (auto* set : {&train, &val}) {
        const int64_t offset = set == &train ? 0 : 5;
        for (int64_t id = 0; id < set->size(); ++id) {
          std::vector<uint8_t> img(kIdxRows * kIdxCols);
          int32_t label;
          set->read(&id, 1, img.data(), &label);
          const int r = int(id + offset);
          if (label != idx_label(r)) ++wrong;
          for (int y = 0; y < kIdxRows; ++y)
            for (int x = 0; x < kIdxCols; ++x)
              if (img[y * kIdxCols + x] != idx_pixel(r, y, x)) ++wrong;
        }
      }
      BOOST_TEST(wrong == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(idx_test_split_statistics_say_where_they_come_from) {
  const std::string in = temp_dir("idx-stats");
  write_bytes(in + "/img", idx_images(7, 7));
  write_bytes(in + "/lab", idx_labels(7, 7));
  data::shard::IdxOptions o;
  o.images = in + "/img";
  o.labels = in + "/lab";
  o.split = "test";
  o.output_dir = in + "/own";
  data::shard::convert_idx(o);
  auto own = h5::File::open_read(in + "/own/test-00000-of-00001.h5");
  BOOST_TEST(own.root().attr_string("stats_from") == "test");
  BOOST_TEST(own.root().attr_string(data::shard::kAttrDataset) == "mnist");
  BOOST_TEST(own.root().attr_strings(data::shard::kAttrClassNames).at(9) == "9");

  o.output_dir = in + "/given";
  o.mean = {0.25f};
  o.std = {0.5f};
  data::shard::convert_idx(o);
  auto given = data::ShardSet::open(in + "/given", "test");
  BOOST_TEST(given.info().mean == std::vector<float>{0.25f});
  BOOST_TEST(given.info().std == std::vector<float>{0.5f});
  auto file = h5::File::open_read(in + "/given/test-00000-of-00001.h5");
  BOOST_TEST(file.root().attr_string("stats_from") == "options");
}

BOOST_AUTO_TEST_CASE(cifar10_corrupt_inputs_fail_with_one_line_and_no_file) {
  const std::string out = temp_dir("cifar-bad-out");
  {
    const std::string in = write_cifar_input("cifar-trunc");
    auto bytes = cifar_batch(3, 3);
    bytes.resize(bytes.size() - 1062);  // the last record keeps 2011 of its 3073 bytes
    write_bytes(in + "/data_batch_3.bin", bytes);
    expect_input_error(
        [&] {
          data::shard::convert_cifar10({in, out, 1, 0});
        },
        in + "/data_batch_3.bin: record 2 is truncated (2011 of 3073 bytes)");
    BOOST_TEST(empty_dir(out));
  }
  {
    const std::string in = write_cifar_input("cifar-label");
    auto bytes = cifar_batch(6, 5);
    bytes[1 * data::shard::kCifarRecordBytes] = 10;
    write_bytes(in + "/test_batch.bin", bytes);
    expect_input_error(
        [&] {
          data::shard::convert_cifar10({in, out, 1, 0});
        },
        in + "/test_batch.bin: record 1 has label 10, outside 0..9 (10 classes)");
    BOOST_TEST(empty_dir(out));
  }
  {
    const std::string in = write_cifar_input("cifar-missing");
    fs::remove(in + "/data_batch_5.bin");
    expect_input_error(
        [&] {
          data::shard::convert_cifar10({in, out, 1, 0});
        },
        in + "/data_batch_5.bin: cannot open (No such file or directory)");
    BOOST_TEST(empty_dir(out));
  }
  {
    // Valid input, but more shards than the 5 test records: refused before any file.
    const std::string in = write_cifar_input("cifar-shards");
    expect_input_error(
        [&] {
          data::shard::convert_cifar10({in, out, 6, 0});
        },
        "--shards 6: must be between 1 and the 5 samples of split test");
    BOOST_TEST(empty_dir(out));
  }
}

BOOST_AUTO_TEST_CASE(idx_corrupt_inputs_fail_with_one_line_and_no_file) {
  const std::string in = temp_dir("idx-bad"), out = temp_dir("idx-bad-out");
  const std::string images = in + "/img.gz", labels = in + "/lab.gz";
  auto convert = [&] {
    data::shard::IdxOptions o;
    o.images = images;
    o.labels = labels;
    o.output_dir = out;
    data::shard::convert_idx(o);
  };
  auto case_ = [&](const std::vector<uint8_t>& img, const std::vector<uint8_t>& lab,
                   const std::string& message) {
    write_maybe_gz(images, img);
    write_maybe_gz(labels, lab);
    expect_input_error(convert, message);
    BOOST_TEST(empty_dir(out));
  };
  // The labels file given as images.
  case_(idx_labels(7, 7), idx_labels(7, 7),
        images +
            ": wrong IDX magic 0x00000801, expected 0x00000803 (unsigned-byte images, 3 "
            "dimensions)");
  case_(idx_images(7, 7), idx_labels(6, 6),
        labels + ": holds 6 labels but " + images + " holds 7 images");
  {
    auto img = idx_images(7, 7);
    img.resize(img.size() - 10);  // record 6 keeps 10 of its 20 bytes
    case_(img, idx_labels(7, 7), images + ": record 6 is truncated (10 of 20 bytes)");
  }
  {
    auto img = idx_images(7, 6);  // whole records, but one fewer than declared
    case_(img, idx_labels(7, 7),
          images + ": holds only 6 of the 7 records its header declares (truncated)");
    case_(idx_images(7, 8), idx_labels(7, 7),
          images + ": has data past its last record 6 (its header declares 7 records)");
  }
  {
    auto lab = idx_labels(7, 7);
    lab[8 + 3] = 10;
    case_(idx_images(7, 7), lab, labels + ": record 3 has label 10, outside 0..9 (10 classes)");
  }
  fs::remove(labels);
  write_maybe_gz(images, idx_images(7, 7));
  expect_input_error(convert, labels + ": cannot open (No such file or directory)");
  BOOST_TEST(empty_dir(out));
}

BOOST_AUTO_TEST_CASE(rt_shard_binary_prints_one_line_and_exits_2) {
  // bin/tests/unit -> bin/rt-shard
  const fs::path tool = fs::canonical("/proc/self/exe").parent_path().parent_path() / "rt-shard";
  BOOST_REQUIRE_MESSAGE(fs::exists(tool), tool << " is missing: make bin/rt-shard first");
  const std::string in = write_cifar_input("cifar-cli"), out = temp_dir("cifar-cli-out") + "/new";
  auto bytes = cifar_batch(3, 4);
  bytes.resize(bytes.size() - 1062);
  write_bytes(in + "/data_batch_3.bin", bytes);
  const std::string err = out + ".stderr";
  const std::string command =
      tool.string() + " cifar10 --input " + in + " --output " + out + " >/dev/null 2>" + err;
  const int status = std::system(command.c_str());
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 2);
  std::ifstream text(err);
  std::string all((std::istreambuf_iterator<char>(text)), std::istreambuf_iterator<char>());
  BOOST_TEST(all ==
             "rt-shard: " + in + "/data_batch_3.bin: record 3 is truncated (2011 of 3073 bytes)\n");
  BOOST_TEST(!fs::exists(out));  // created for the output, removed on the error
  fs::remove(err);
}

BOOST_AUTO_TEST_CASE(a_failed_conversion_removes_only_the_directories_it_created) {
  const std::string in = write_cifar_input("cifar-dirs"), base = temp_dir("cifar-dirs-out");
  fs::remove(in + "/test_batch.bin");  // read after every train batch: fails last
  const std::string missing = in + "/test_batch.bin: cannot open (No such file or directory)";
  // Two levels created, then the input fails: both go, the directory above them stays.
  expect_input_error(
      [&] {
        data::shard::convert_cifar10({in, base + "/new/deeper/", 1, 0});
      },
      missing);
  BOOST_TEST(!fs::exists(base + "/new"));
  BOOST_TEST(fs::is_directory(base));
  // A directory that existed before stays, empty or not.
  fs::create_directories(base + "/old");
  expect_input_error([&] { data::shard::convert_cifar10({in, base + "/old", 1, 0}); }, missing);
  BOOST_TEST(fs::is_directory(base + "/old"));
  write_bytes(base + "/old/notes.txt", {1, 2, 3});
  expect_input_error([&] { data::shard::convert_cifar10({in, base + "/old/sub", 1, 0}); }, missing);
  BOOST_TEST(!fs::exists(base + "/old/sub"));
  BOOST_TEST(fs::exists(base + "/old/notes.txt"));
  // IDX and Fashion-MNIST go the same way.
  data::shard::IdxOptions idx;
  idx.images = in + "/none-images";
  idx.labels = in + "/none-labels";
  idx.output_dir = base + "/idx/out";
  expect_input_error([&] { data::shard::convert_idx(idx); },
                     idx.images + ": cannot open (No such file or directory)");
  BOOST_TEST(!fs::exists(base + "/idx"));
  data::shard::FashionMnistOptions fashion;
  fashion.input_dir = in;
  fashion.output_dir = base + "/fashion";
  expect_input_error([&] { data::shard::convert_fashion_mnist(fashion); },
                     in + "/train-images-idx3-ubyte.gz: cannot open (No such file or directory)");
  BOOST_TEST(!fs::exists(base + "/fashion"));
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(base)) left.push_back(e.path().string());
  BOOST_TEST((left == std::vector<std::string>{base + "/old", base + "/old/notes.txt"}));
}

BOOST_AUTO_TEST_CASE(a_failed_commit_leaves_no_shard_and_no_temp_file) {
  const std::string in = write_cifar_input("cifar-commit"), out = temp_dir("cifar-commit-out");
  // A directory where the test shard goes: its rename fails after train's has been done.
  fs::create_directories(out + "/test-00000-of-00001.h5");
  BOOST_CHECK_THROW(data::shard::convert_cifar10({in, out, 1, 0}), Error);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
  BOOST_TEST((left == std::vector<std::string>{"test-00000-of-00001.h5"}));
}

BOOST_AUTO_TEST_CASE(a_new_conversion_replaces_shards_of_another_count) {
  const std::string in = write_cifar_input("cifar-restale"), out = temp_dir("cifar-restale-out");
  data::shard::convert_cifar10({in, out, 3, 0});
  data::shard::convert_cifar10({in, out, 2, 0});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  BOOST_TEST(
      (names == std::vector<std::string>{"test-00000-of-00002.h5", "test-00001-of-00002.h5",
                                         "train-00000-of-00002.h5", "train-00001-of-00002.h5"}));
  BOOST_TEST(data::ShardSet::open(out, "train").info().shards == 2);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- ShardSet ------------------------------------------------------------------------

namespace {

// A 3-shard split "train" of 10 samples [1, 2, 3] whose pixels encode the sample id.
data::shard::SplitImages small_split() {
  data::shard::SplitImages s;
  s.dataset = "testset";
  s.split = "train";
  s.channels = 1;
  s.height = 2;
  s.width = 3;
  s.class_names = {"a", "b", "c"};
  s.mean = {0.5f};
  s.std = {0.25f};
  s.stats_from = "train";
  for (int id = 0; id < 10; ++id) {
    for (int k = 0; k < 6; ++k) s.images.push_back(uint8_t(id * 10 + k));
    s.labels.push_back(id % 3);
  }
  return s;
}

std::string write_small_split(const std::string& name) {
  const std::string dir = temp_dir(name);
  const auto split = small_split();
  data::shard::write_splits(dir, {&split}, 3);
  return dir;
}

const char* kHint =
    "re-create it with: rt-shard idx --images F --labels F --dataset testset --output ";

}  // namespace

BOOST_AUTO_TEST_SUITE(shard_set)

BOOST_AUTO_TEST_CASE(reads_any_ids_in_the_callers_order) {
  const std::string dir = write_small_split("set-read");
  auto set = data::ShardSet::open(dir, "train");
  BOOST_TEST(set.info().samples == 10);
  BOOST_TEST(set.info().shards == 3);
  BOOST_TEST(set.info().classes == 3);
  const std::vector<int64_t> ids{9, 0, 4, 4, 3, 8, 1, 7, 2};  // across shards, a repeat
  std::vector<uint8_t> images(ids.size() * 6);
  std::vector<int32_t> labels(ids.size());
  set.read(ids.data(), ids.size(), images.data(), labels.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    BOOST_TEST(labels[i] == ids[i] % 3);
    for (int k = 0; k < 6; ++k) BOOST_TEST(images[i * 6 + k] == ids[i] * 10 + k);
  }
}

BOOST_AUTO_TEST_CASE(reads_extra_per_sample_datasets) {
  const std::string dir = write_small_split("set-extra");
  for (int i = 0; i < 3; ++i) {  // rows 0-2, 3-5, 6-9: a [rows, 2] uint8 dataset encoding id
    auto file = h5::File::open_write(dir + "/" + data::shard::file_name("train", i, 3));
    const int64_t first = file.root().attr<int64_t>(data::shard::kAttrFirstSample);
    const hsize_t rows = file.root().open_dataset(data::shard::kLabels).dims()[0];
    std::vector<uint8_t> values;
    for (hsize_t r = 0; r < rows; ++r)
      values.insert(values.end(), {uint8_t(first + r), uint8_t(100 + first + r)});
    file.root().write<uint8_t>("multi_hot", {rows, 2}, values.data());
  }
  auto set = data::ShardSet::open(dir, "train");
  BOOST_TEST(set.has("multi_hot"));
  BOOST_TEST(!set.has("pass"));
  BOOST_TEST(set.row_elements("multi_hot") == 2u);
  const std::vector<int64_t> ids{8, 2, 5, 2};
  std::vector<uint8_t> out(ids.size() * 2);
  set.read_extra("multi_hot", ids.data(), ids.size(), out.data());
  BOOST_TEST((out == std::vector<uint8_t>{8, 108, 2, 102, 5, 105, 2, 102}));
}

BOOST_AUTO_TEST_CASE(missing_directory_and_files_name_the_pattern) {
  const std::string dir = temp_dir("set-none");
  expect_input_error([&] { data::ShardSet::open(dir + "/nope", "train"); },
                     "shard directory " + dir +
                         "/nope does not exist; create the shards with "
                         "rt-shard (CIFAR-10, IDX) or rt-fibergen (fiber) --output " +
                         dir + "/nope");
  expect_input_error([&] { data::ShardSet::open(dir, "val"); },
                     "no shards of split 'val' in " + dir + " (looked for " + dir +
                         "/val-NNNNN-of-NNNNN.h5); create them with rt-shard (CIFAR-10, IDX) or "
                         "rt-fibergen (fiber) --output " +
                         dir);
}

BOOST_AUTO_TEST_CASE(a_missing_shard_is_named) {
  const std::string dir = write_small_split("set-missing");
  fs::remove(dir + "/train-00001-of-00003.h5");
  expect_input_error([&] { data::ShardSet::open(dir, "train"); },
                     dir +
                         "/train-00001-of-00003.h5 is missing (split 'train' has 3 shards, 2 "
                         "found); " +
                         kHint + dir);
}

BOOST_AUTO_TEST_CASE(wrong_format_name_and_version_say_what_to_run) {
  const std::string dir = write_small_split("set-format");
  const std::string path = dir + "/train-00002-of-00003.h5";
  h5::File::open_write(path).root().set_attr(data::shard::kAttrFormat, "somebody-else");
  expect_input_error([&] { data::ShardSet::open(dir, "train"); },
                     path +
                         ": format is 'somebody-else', expected 'ringtrain-shard' (not a "
                         "ringtrain shard); " +
                         kHint + dir);
  {
    auto file = h5::File::open_write(path);
    file.root().set_attr(data::shard::kAttrFormat, data::shard::kFormatName);
    file.root().set_attr(data::shard::kAttrFormatVersion, int32_t(2));
  }
  expect_input_error(
      [&] { data::ShardSet::open(dir, "train"); },
      path + ": format_version is 2, this ringtrain reads version 1; " + kHint + dir);
}

BOOST_AUTO_TEST_CASE(dtype_and_shape_mismatches_are_named) {
  const std::string dir = write_small_split("set-dtype");
  const std::string path = dir + "/train-00000-of-00003.h5";
  // Rebuild shard 0 with float images and int64 labels, attributes copied.
  auto rebuild = [&](bool float_images) {
    std::vector<std::string> names;
    auto old = h5::File::open_read(path);
    const auto& r = old.root();
    h5::AtomicFile out(path);
    for (const char* key :
         {data::shard::kAttrFormat, data::shard::kAttrDataset, data::shard::kAttrSplit})
      out.root().set_attr(key, r.attr_string(key));
    out.root().set_attr(data::shard::kAttrClassNames, r.attr_strings(data::shard::kAttrClassNames));
    for (const char* key : {data::shard::kAttrMean, data::shard::kAttrStd})
      out.root().set_attr(key, r.attr_vector<float>(key));
    for (const char* key : {data::shard::kAttrFormatVersion, data::shard::kAttrShardIndex,
                            data::shard::kAttrShardCount})
      out.root().set_attr(key, r.attr<int32_t>(key));
    for (const char* key : {data::shard::kAttrFirstSample, data::shard::kAttrSplitSamples})
      out.root().set_attr(key, r.attr<int64_t>(key));
    if (float_images) {
      out.root().write<float>(data::shard::kImages, {3, 1, 2, 3},
                              std::vector<float>(18, 1.f).data());
      out.root().write<int32_t>(data::shard::kLabels, std::vector<int32_t>{0, 1, 2});
    } else {
      out.root().write<uint8_t>(data::shard::kImages, {3, 1, 2, 3},
                                std::vector<uint8_t>(18, 1).data());
      out.root().write<int64_t>(data::shard::kLabels, std::vector<int64_t>{0, 1, 2});
    }
    out.commit();
  };
  rebuild(true);
  expect_input_error(
      [&] { data::ShardSet::open(dir, "train"); },
      path + ": /images must be uint8 [N, C, H, W], found float32 [3, 1, 2, 3]; " + kHint + dir);
  rebuild(false);
  expect_input_error(
      [&] { data::ShardSet::open(dir, "train"); },
      path + ": /labels must be int32 [3] (one per image), found int64 [3]; " + kHint + dir);
}

BOOST_AUTO_TEST_CASE(non_finite_mean_and_non_positive_std_are_refused_at_open) {
  const std::string dir = write_small_split("set-stats");
  const std::string path = dir + "/train-00001-of-00003.h5";
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto with_stats = [&](float mean, float std, const std::string& message) {
    {
      auto file = h5::File::open_write(path);
      file.root().set_attr(data::shard::kAttrMean, std::vector<float>{mean});
      file.root().set_attr(data::shard::kAttrStd, std::vector<float>{std});
    }
    expect_input_error([&] { data::ShardSet::open(dir, "train"); },
                       path + ": " + message + "; " + kHint + dir);
  };
  with_stats(inf, 0.25f, "attribute mean[0] is inf, not a finite number");
  with_stats(nan, 0.25f, "attribute mean[0] is nan, not a finite number");
  with_stats(0.5f, inf, "attribute std[0] is inf, not a positive finite number");
  with_stats(0.5f, nan, "attribute std[0] is nan, not a positive finite number");
  with_stats(0.5f, 0.f, "attribute std[0] is 0, not a positive finite number");
  with_stats(0.5f, -0.25f, "attribute std[0] is -0.25, not a positive finite number");
}

BOOST_AUTO_TEST_CASE(an_empty_split_is_named_with_its_directory) {
  const std::string dir = temp_dir("set-empty");
  const std::string path = dir + "/val-00000-of-00001.h5";
  {
    h5::AtomicFile out(path);
    auto& root = out.root();
    for (const auto& [key, value] : std::vector<std::pair<const char*, const char*>>{
             {data::shard::kAttrFormat, data::shard::kFormatName},
             {data::shard::kAttrDataset, "testset"},
             {data::shard::kAttrSplit, "val"}})
      root.set_attr(key, value);
    root.set_attr(data::shard::kAttrFormatVersion, data::shard::kFormatVersion);
    root.set_attr(data::shard::kAttrClassNames, std::vector<std::string>{"a", "b"});
    root.set_attr(data::shard::kAttrMean, std::vector<float>{0.5f});
    root.set_attr(data::shard::kAttrStd, std::vector<float>{0.25f});
    root.set_attr(data::shard::kAttrShardIndex, int32_t(0));
    root.set_attr(data::shard::kAttrShardCount, int32_t(1));
    root.set_attr(data::shard::kAttrFirstSample, int64_t(0));
    root.set_attr(data::shard::kAttrSplitSamples, int64_t(0));
    root.create_dataset<uint8_t>(data::shard::kImages, {0, 1, 2, 3});
    root.create_dataset<int32_t>(data::shard::kLabels, {0});
    out.commit();
  }
  expect_input_error(
      [&] { data::ShardSet::open(dir, "val"); },
      "split 'val' in " + dir + " holds no samples (1 shard of 0 rows); " + kHint + dir);
}

BOOST_AUTO_TEST_CASE(a_split_unlike_the_train_split_names_both_and_the_property) {
  const std::string dir = write_small_split("set-layout");  // train: 1x2x3, classes a, b, c
  const auto trained = data::ShardSet::open(dir, "train").info();
  const std::string train_files = dir + "/train-*-of-00003.h5";
  auto expect = [&](void (*change)(data::shard::SplitImages&), const std::string& message) {
    data::shard::SplitImages val = data::shard::slice_split(small_split(), 0, 4, "val");
    change(val);
    val.images.assign(size_t(val.samples()) * val.image_bytes(), 7);
    data::shard::write_splits(dir, {&val}, 1);
    expect_input_error([&] { data::ShardSet::open_matching(trained, dir, "val"); },
                       "split 'val' does not match split 'train': " + message + "; " + kHint + dir);
  };
  const std::string val_file = dir + "/val-00000-of-00001.h5";
  expect([](data::shard::SplitImages& v) { v.height = 1; },
         "height 1 in " + val_file + ", 2 in " + train_files);
  expect([](data::shard::SplitImages& v) { v.width = 4; },
         "width 4 in " + val_file + ", 3 in " + train_files);
  expect(
      [](data::shard::SplitImages& v) {
        v.channels = 3;
        v.mean.assign(3, 0.5f);
        v.std.assign(3, 0.25f);
      },
      "channels 3 in " + val_file + ", 1 in " + train_files);
  expect([](data::shard::SplitImages& v) { v.class_names.push_back("d"); },
         "classes 4 in " + val_file + ", 3 in " + train_files);
  expect([](data::shard::SplitImages& v) { v.class_names[1] = "B"; },
         "class 1 'B' in " + val_file + ", 'b' in " + train_files);
  // The same layout passes.
  data::shard::SplitImages same = data::shard::slice_split(small_split(), 0, 4, "val");
  data::shard::write_splits(dir, {&same}, 1);
  BOOST_TEST(data::ShardSet::open_matching(trained, dir, "val").size() == 4);
}

BOOST_AUTO_TEST_CASE(a_shard_changed_after_open_fails_the_next_read_naming_it) {
  const std::string dir = write_small_split("set-truncate");
  const std::string path = dir + "/train-00002-of-00003.h5";  // rows 6-9
  const std::vector<int64_t> ids{0, 7, 9};
  std::vector<uint8_t> images(ids.size() * 6);
  std::vector<int32_t> labels(ids.size());
  {
    auto set = data::ShardSet::open(dir, "train");
    set.read(ids.data(), ids.size(), images.data(), labels.data());
    // Cut the file inside row 7's pixels (70..75; row 6 holds 60..65 before them): HDF5
    // reads the lost rows as zeros, without an error.
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string rows_6_7{60, 61, 62, 63, 64, 65, 70, 71, 72, 73, 74, 75};
    const size_t at = bytes.find(rows_6_7);
    BOOST_REQUIRE(at != std::string::npos);
    const size_t cut = at + 8;
    fs::resize_file(path, cut);
    expect_input_error([&] { set.read(ids.data(), ids.size(), images.data(), labels.data()); },
                       "shard " + path + " was truncated or replaced while training: size " +
                           std::to_string(bytes.size()) + " -> " + std::to_string(cut) + " bytes");
    // Reads of the other shards still go on.
    const std::vector<int64_t> first{1, 4};
    BOOST_CHECK_NO_THROW(set.read(first.data(), first.size(), images.data(), labels.data()));
  }
  {
    const std::string fresh = write_small_split("set-replace");
    auto set = data::ShardSet::open(fresh, "train");
    const std::string target = fresh + "/train-00002-of-00003.h5";
    const auto inode = [&] {
      struct stat st {};
      ::stat(target.c_str(), &st);
      return std::to_string(st.st_ino);
    };
    const std::string before = inode();
    fs::copy_file(target, target + ".new");
    fs::rename(target + ".new", target);  // same bytes, another file
    expect_input_error(
        [&] { set.read(ids.data(), ids.size(), images.data(), labels.data()); },
        "shard " + target + " was replaced while training: inode " + before + " -> " + inode());
  }
  {
    const std::string fresh = write_small_split("set-rewrite");
    auto set = data::ShardSet::open(fresh, "train");
    const std::string target = fresh + "/train-00000-of-00003.h5";
    struct stat st {};
    ::stat(target.c_str(), &st);
    const int64_t before = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    // Rewritten in place, same size (a cp over it): only the modification time tells.
    const timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    BOOST_REQUIRE(::utimensat(AT_FDCWD, target.c_str(), times, 0) == 0);
    expect_input_error([&] { set.read(ids.data(), ids.size(), images.data(), labels.data()); },
                       "shard " + target + " was modified while training: mtime " +
                           std::to_string(before) + " -> 1000000000000000000 ns since 1970");
  }
}

BOOST_AUTO_TEST_CASE(broken_continuity_and_labels_are_named) {
  const std::string dir = write_small_split("set-first");
  const std::string path = dir + "/train-00001-of-00003.h5";
  h5::File::open_write(path).root().set_attr(data::shard::kAttrFirstSample, int64_t(4));
  expect_input_error(
      [&] { data::ShardSet::open(dir, "train"); },
      path + ": first_sample is 4, expected 3 (where the previous shard ends); " + kHint + dir);
  h5::File::open_write(path).root().set_attr(data::shard::kAttrFirstSample, int64_t(3));
  {
    auto file = h5::File::open_write(path);
    const int32_t bad = 7;
    file.root().open_dataset(data::shard::kLabels).write_rows(2, 1, &bad);
  }
  expect_input_error([&] { data::ShardSet::open(dir, "train"); },
                     path + ": row 2 has label 7, outside 0..2 (3 class names); " + kHint + dir);
  fs::copy_file(dir + "/train-00000-of-00003.h5", dir + "/train-00000-of-00002.h5");
  expect_input_error([&] { data::ShardSet::open(dir, "train"); },
                     dir +
                         ": split 'train' has shards of two conversions (2 and 3 shards); "
                         "remove the stale files and re-create it with rt-shard (CIFAR-10, IDX) or "
                         "rt-fibergen (fiber) --output " +
                         dir);
}

BOOST_AUTO_TEST_SUITE_END()
