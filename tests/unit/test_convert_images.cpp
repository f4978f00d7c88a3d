// test_convert_images.cpp — rt-shard images before any pixel: the stratified split's exact
// counts and determinism, the label CSV's one-line errors, and the class list.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "image_files.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_decode.hpp"
#include "ringtrain/data/shard/convert_images.hpp"
#include "ringtrain/io/h5.hpp"
#include "temp_dir.hpp"

using namespace ringtrain;
using data::shard::ImageItem;

namespace {

// n items of class c, named so that the path order interleaves the classes.
std::vector<ImageItem> items_of(const std::vector<int>& per_class) {
  std::vector<ImageItem> items;
  for (size_t c = 0; c < per_class.size(); ++c)
    for (int i = 0; i < per_class[c]; ++i) {
      ImageItem item;
      item.path = "img" + std::to_string(1000 + i) + "-" + std::to_string(c) + ".png";
      item.class_index = int32_t(c);
      items.push_back(item);
    }
  return items;
}

// counts[class][split]
std::vector<std::array<int, 3>> counts(const std::vector<ImageItem>& items,
                                       const std::vector<int>& split, int classes) {
  std::vector<std::array<int, 3>> out(size_t(classes), {0, 0, 0});
  for (size_t i = 0; i < items.size(); ++i) ++out[size_t(items[i].class_index)][size_t(split[i])];
  return out;
}

std::string csv_error(const std::string& dir, const std::string& text) {
  rt_test::write_bytes(dir + "/l.csv", text);
  try {
    data::shard::read_label_csv(dir + "/l.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(convert_images)

// Per class: test = round(n * 0.1), val = round(n * 0.2), train the rest.
BOOST_AUTO_TEST_CASE(stratified_split_counts_per_class) {
  const std::vector<ImageItem> items = items_of({10, 7, 1, 25});
  const std::vector<int> split = data::shard::stratified_split(items, 4, 0.2, 0.1, 42);
  const std::vector<std::array<int, 3>> want{{7, 2, 1}, {5, 1, 1}, {1, 0, 0}, {17, 5, 3}};
  const auto got = counts(items, split, 4);
  for (size_t c = 0; c < want.size(); ++c)
    BOOST_TEST(got[c] == want[c], boost::test_tools::per_element());
}

// The split of an item follows from its path, class and the seed: the listing's order does not
// matter, the thread or platform neither (our own Fisher-Yates over std::mt19937_64).
BOOST_AUTO_TEST_CASE(stratified_split_is_deterministic_by_path_and_seed) {
  std::vector<ImageItem> items = items_of({12, 9});
  const std::vector<int> a = data::shard::stratified_split(items, 2, 0.25, 0.25, 7);
  std::vector<ImageItem> reversed(items.rbegin(), items.rend());
  const std::vector<int> b = data::shard::stratified_split(reversed, 2, 0.25, 0.25, 7);
  for (size_t i = 0; i < items.size(); ++i) BOOST_TEST(a[i] == b[items.size() - 1 - i]);
  // Pinned: which of class 0's files (img1000..img1011) seed 7 sends to test and val.
  std::string test, val;
  for (size_t i = 0; i < 12; ++i) {
    if (a[i] == 2) test += items[i].path.substr(3, 4) + " ";
    if (a[i] == 1) val += items[i].path.substr(3, 4) + " ";
  }
  BOOST_TEST_MESSAGE("seed 7 class 0: test " << test << "val " << val);
  BOOST_TEST(test == "1000 1002 1004 ");
  BOOST_TEST(val == "1005 1006 1009 ");
  const std::vector<int> other = data::shard::stratified_split(items, 2, 0.25, 0.25, 8);
  BOOST_TEST((other != a));
}

BOOST_AUTO_TEST_CASE(label_csv_errors_name_file_and_line) {
  const std::string dir = rt_test::temp_dir("label-csv");
  BOOST_TEST(
      csv_error(dir, "file,class\na.png,x\n") ==
      dir + "/l.csv:1: the header must be 'path,label' or 'path,label,multi_hot,pass,zone_pass'");
  BOOST_TEST(csv_error(dir, "path,label\na.png,x\nb.png\n") ==
             dir + "/l.csv:3: expected 2 fields, found 1");
  BOOST_TEST(csv_error(dir, "path,label,multi_hot,pass,zone_pass\na.png,x,0|2,1,1|1|1|1\n") ==
             dir + "/l.csv:2: multi_hot '0|2': entries must be 0 or 1, separated by '|'");
  BOOST_TEST(csv_error(dir, "path,label,multi_hot,pass,zone_pass\na.png,x,0|1,1,1|1|1\n") ==
             dir + "/l.csv:2: zone_pass '1|1|1' has 3 entries, expected 4");
  BOOST_TEST(csv_error(dir, "path,label,multi_hot,pass,zone_pass\na.png,x,0|1,yes,1|1|1|1\n") ==
             dir + "/l.csv:2: pass 'yes': must be 0 or 1");
  BOOST_TEST(csv_error(dir, "path,label\na.png,x\na.png,y\n") ==
             dir + "/l.csv:3: " + dir + "/a.png: listed twice");
}

BOOST_AUTO_TEST_CASE(classes_sorted_or_given_and_labels_checked) {
  const std::string dir = rt_test::temp_dir("label-classes");
  rt_test::write_bytes(dir + "/l.csv", "path,label\nc.png,dog\na.png,cat\nb.png,bird\n");
  for (const char* name : {"a.png", "b.png", "c.png"}) rt_test::write_bytes(dir + "/" + name, "x");
  data::shard::ImageListing listing = data::shard::read_label_csv(dir + "/l.csv");
  std::vector<std::string> skipped;
  const auto sorted = data::shard::assign_classes(listing, {}, false, &skipped);
  BOOST_TEST(sorted == (std::vector<std::string>{"bird", "cat", "dog"}),
             boost::test_tools::per_element());
  BOOST_TEST(listing.items[0].class_index == 1);  // a.png, cat
  listing = data::shard::read_label_csv(dir + "/l.csv");
  try {
    data::shard::assign_classes(listing, {"dog", "cat"}, false, &skipped);
    BOOST_FAIL("no error for a label outside --classes");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               dir + "/l.csv:4: " + dir +
                   "/b.png: label 'bird' is not in the class list (dog, cat)");
  }
  listing = data::shard::read_label_csv(dir + "/l.csv");
  data::shard::assign_classes(listing, {"dog", "cat"}, true, &skipped);
  BOOST_TEST(listing.items.size() == 2u);
  BOOST_TEST(skipped.size() == 1u);
  BOOST_TEST(listing.items[1].class_index == 0);  // c.png, dog
}

// PNG, TIFF and JPEG of different sizes, grey and RGB, 8 and 16 bit, in one ImageFolder with
// --size 8 --channels 3: one shard whose rows (in path order) are fit_image's output for each
// file, with the labels, the shape and the per-channel mean/std of those rows.
BOOST_AUTO_TEST_CASE(mixed_formats_resized_to_rgb_rows_in_path_order) {
  const std::string dir = rt_test::temp_dir("images-mixed");
  std::filesystem::create_directories(dir + "/in/cat");
  std::filesystem::create_directories(dir + "/in/dog");
  auto pattern = [](int w, int h, int c, int depth) {
    rt_test::TestImage im{w, h, c, depth, {}};
    for (int i = 0; i < w * h * c; ++i)
      im.pixels.push_back(uint16_t(depth == 8 ? (i * 29 + 3) % 256 : (i * 7919 + 11) % 65536));
    return im;
  };
  rt_test::write_png_file(dir + "/in/cat/x.png", pattern(16, 8, 3, 8));
  rt_test::write_tiff_file(dir + "/in/cat/y.tif", pattern(8, 8, 3, 16), PHOTOMETRIC_RGB);
  rt_test::write_png_file(dir + "/in/dog/w.png", pattern(8, 8, 1, 8));
  rt_test::write_jpeg_file(dir + "/in/dog/z.jpg", pattern(8, 16, 1, 8), 90);
  data::shard::ImagesOptions o;
  o.input_dir = dir + "/in";
  o.output_dir = dir + "/out";
  o.size = 8;
  o.channels = 3;
  o.val_fraction = o.test_fraction = 0;
  std::ostringstream out, err;
  const auto files = data::shard::convert_images(o, out, err);
  BOOST_TEST_REQUIRE(files.size() == 1u);
  std::vector<uint8_t> want;
  for (const char* name : {"cat/x.png", "cat/y.tif", "dog/w.png", "dog/z.jpg"}) {
    const auto rows = data::fit_image(data::decode_image(dir + "/in/" + name), 3, 8);
    want.insert(want.end(), rows.begin(), rows.end());
  }
  h5::File f = h5::File::open_read(files[0]);
  const h5::Dataset images = f.root().open_dataset("images");
  BOOST_TEST((images.dims() == h5::Dims{4, 3, 8, 8}));
  BOOST_TEST(images.read_all<uint8_t>() == want, boost::test_tools::per_element());
  const std::vector<int32_t> labels{0, 0, 1, 1};
  BOOST_TEST(f.root().open_dataset("labels").read_all<int32_t>() == labels,
             boost::test_tools::per_element());
  const auto mean = f.root().attr_vector<float>("mean"), std = f.root().attr_vector<float>("std");
  BOOST_TEST_REQUIRE(mean.size() == 3u);
  for (size_t c = 0; c < 3; ++c) {
    double s = 0, q = 0;
    for (size_t r = 0; r < 4; ++r)
      for (size_t i = 0; i < 64; ++i) {
        const double v = want[(r * 3 + c) * 64 + i];
        s += v, q += v * v;
      }
    const double m = s / 256;
    BOOST_TEST(mean[c] == m / 255, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(std[c] == std::sqrt(q / 256 - m * m) / 255, boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(err.str() == "");
}

// A decompression bomb (a header declaring 60000 x 60000 pixels) is bad input like a corrupt
// file: with skip_bad it is left out, listed and counted, and the other images are written.
BOOST_AUTO_TEST_CASE(a_bomb_is_skipped_and_counted_under_skip_bad) {
  const std::string dir = rt_test::temp_dir("images-bomb");
  std::filesystem::create_directories(dir + "/in/cat");
  rt_test::TestImage grey{4, 4, 1, 8, std::vector<uint16_t>(16, 7)};
  rt_test::write_png_file(dir + "/in/cat/a.png", grey);
  rt_test::write_png_header_only(dir + "/in/cat/b.png", 60000, 60000);
  rt_test::write_png_file(dir + "/in/cat/c.png", grey);
  data::shard::ImagesOptions o;
  o.input_dir = dir + "/in";
  o.output_dir = dir + "/out";
  o.val_fraction = o.test_fraction = 0;
  o.skip_bad = true;
  std::ostringstream out, err;
  const auto files = data::shard::convert_images(o, out, err);
  BOOST_TEST_REQUIRE(files.size() == 1u);
  BOOST_TEST(err.str() == "rt-shard: skipped " + dir +
                              "/in/cat/b.png: 60000x60000 image (3600000000 pixels) is over the "
                              "limit of 100000000 pixels (--max-pixels)\n"
                              "rt-shard: skipped 1 bad images\n");
  h5::File f = h5::File::open_read(files[0]);
  BOOST_TEST((f.root().open_dataset("images").dims() == h5::Dims{2, 1, 4, 4}));
}

BOOST_AUTO_TEST_SUITE_END()
