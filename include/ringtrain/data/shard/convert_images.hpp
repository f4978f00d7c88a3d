// convert_images.hpp — `rt-shard images`: a folder of class folders (torchvision's ImageFolder
// layout) or a label CSV of PNG/JPEG/TIFF files into train/val/test shards.
//
// defines: ImageItem, ImageListing, list_image_folder(), read_label_csv(), assign_classes(),
//          stratified_split(), ImagesOptions, convert_images()
//
// Every check names the file in one line (ringtrain::InputError); with skip_bad a bad image is
// left out instead, and the run reports each one and their count.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ringtrain/data/image_decode.hpp"

namespace ringtrain::data::shard {

// One input image and its labels.
struct ImageItem {
  std::string path;   // as opened (folder or CSV path joined with the relative one)
  std::string label;  // the class name
  std::string where;  // "FILE.csv:LINE: " for a CSV row, "" for a folder's file
  int32_t class_index = -1;
  // The CSV's fiber columns (empty without them): multi_hot and zone_pass 0/1 lists, pass 0/1.
  std::vector<uint8_t> multi_hot, zone_pass;
  uint8_t pass = 0;
};

struct ImageListing {
  std::vector<ImageItem> items;  // sorted by path
  bool fiber_columns = false;    // the CSV had multi_hot, pass and zone_pass
};

// DIR/<class>/** (sub-folders included, sorted; names starting with '.' ignored, files directly
// in DIR too); label = the class folder's name. Throws InputError when DIR holds no folder.
ImageListing list_image_folder(const std::string& dir);

// A CSV with the header `path,label` or `path,label,multi_hot,pass,zone_pass`; paths relative to
// the CSV's folder; multi_hot and zone_pass '|'-separated 0/1 lists (zone_pass: 4, A to D;
// multi_hot: one per class), pass 0 or 1. A malformed row is an InputError naming FILE:LINE.
ImageListing read_label_csv(const std::string& csv);

// Sets class_index: class_names is `given` (in its order) or, when empty, the sorted distinct
// labels. An item whose label is not in the list, or whose multi_hot does not have one entry
// per class, or that has an unknown extension or 0 bytes, is bad: an InputError, or with
// skip_bad it is removed and its line appended to `skipped`. Returns the class names.
std::vector<std::string> assign_classes(ImageListing& listing,
                                        const std::vector<std::string>& given, bool skip_bad,
                                        std::vector<std::string>* skipped);

// The split of each item (0 train, 1 val, 2 test), stratified by class: per class, its items
// (sorted by path) in a seeded Fisher-Yates shuffle (std::mt19937_64, the same on every
// standard library), the first round(n * test) to test, the next round(n * val) to val.
std::vector<int> stratified_split(const std::vector<ImageItem>& items, int classes,
                                  double val_fraction, double test_fraction, uint64_t seed);

struct ImagesOptions {
  std::string input_dir;   // ImageFolder layout; or
  std::string labels_csv;  // a label CSV
  std::string output_dir;
  std::string dataset = "images";
  std::vector<std::string> classes;  // empty: sorted folder names or labels
  int size = 0;                      // 0: keep (all images must agree)
  int channels = 0;                  // 0: those of the first image (1 grey, 3 RGB)
  double val_fraction = 0.1, test_fraction = 0.1;
  uint64_t seed = 0;
  int shards = 1;
  int threads = 0;                               // 0: the cores this process may use
  int64_t max_pixels = data::kDefaultMaxPixels;  // a larger image (by its header) is bad input
  bool skip_bad = false;
};

// Lists, checks every image (decoding all of them, in parallel: sizes, and the train split's
// mean and std), then decodes again and writes the shards, a window of images at a time. Each
// shard is built in memory and committed under a staging folder in the output; only when all
// are written are they renamed into place, so a failure leaves no new file. Progress goes to
// `progress` (stderr) past 1000 images or 2 s; the summary to `out`. Returns the files written.
std::vector<std::string> convert_images(const ImagesOptions& options, std::ostream& out,
                                        std::ostream& progress);

}  // namespace ringtrain::data::shard
