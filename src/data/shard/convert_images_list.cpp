// convert_images_list.cpp — what `rt-shard images` reads before any pixel: the ImageFolder
// listing, the label CSV, the class list and the stratified split.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_decode.hpp"
#include "ringtrain/data/shard/convert_images.hpp"

namespace ringtrain::data::shard {
namespace fs = std::filesystem;

namespace {

constexpr int kZones = 4;  // zone_pass: A, B, C, D (as rt-fibergen writes it)

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

std::vector<std::string> split_on(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) out.push_back(item);
  if (!text.empty() && text.back() == sep) out.push_back("");
  return out;
}

// "0|1|1" -> {0, 1, 1}; anything but 0/1 entries, or the wrong count, is an InputError.
std::vector<uint8_t> bits(const std::string& where, const char* column, const std::string& text,
                          size_t count) {
  std::vector<uint8_t> out;
  for (const std::string& b : split_on(text, '|')) {
    RT_REQUIRE_INPUT(b == "0" || b == "1", where, column, " '", text,
                     "': entries must be 0 or 1, separated by '|'");
    out.push_back(uint8_t(b == "1"));
  }
  RT_REQUIRE_INPUT(count == 0 || out.size() == count, where, column, " '", text, "' has ",
                   out.size(), " entries, expected ", count);
  return out;
}

void sort_and_check_unique(ImageListing& listing) {
  std::stable_sort(listing.items.begin(), listing.items.end(),
                   [](const ImageItem& a, const ImageItem& b) { return a.path < b.path; });
  for (size_t i = 1; i < listing.items.size(); ++i)
    RT_REQUIRE_INPUT(listing.items[i].path != listing.items[i - 1].path, listing.items[i].where,
                     listing.items[i].path, ": listed twice");
}

ImageItem csv_row(const std::string& where, const std::vector<std::string>& f, const fs::path& base,
                  bool fiber) {
  RT_REQUIRE_INPUT(!f[0].empty() && !f[1].empty(), where, "empty path or label");
  ImageItem item;
  item.path = fs::path(f[0]).is_absolute() ? f[0] : (base / f[0]).string();
  item.label = f[1];
  item.where = where;
  if (fiber) {
    item.multi_hot = bits(where, "multi_hot", f[2], 0);
    RT_REQUIRE_INPUT(f[3] == "0" || f[3] == "1", where, "pass '", f[3], "': must be 0 or 1");
    item.pass = uint8_t(f[3] == "1");
    item.zone_pass = bits(where, "zone_pass", f[4], kZones);
  }
  return item;
}

// Why an item cannot be used, or "" when it can: the cheap checks, before any decoding.
std::string problem(const ImageItem& item, const std::map<std::string, int>& index,
                    const std::vector<std::string>& names, bool fiber) {
  try {
    data::check_image_file(item.path);
  } catch (const InputError& e) {
    return e.what();
  }
  if (!index.count(item.label)) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return str(item.where, item.path, ": label '", item.label, "' is not in the class list (", list,
               ")");
  }
  if (fiber && item.multi_hot.size() != names.size())
    return str(item.where, item.path, ": multi_hot has ", item.multi_hot.size(),
               " entries, expected ", names.size(), " (one per class)");
  return "";
}

}  // namespace

ImageListing list_image_folder(const std::string& dir) {
  RT_REQUIRE_INPUT(fs::is_directory(dir), "--input ", dir, ": not a folder");
  ImageListing listing;
  for (const auto& klass : fs::directory_iterator(dir)) {
    if (!klass.is_directory() || hidden(klass.path())) continue;
    const std::string label = klass.path().filename().string();
    for (auto it = fs::recursive_directory_iterator(klass.path());
         it != fs::recursive_directory_iterator(); ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_directory())
        listing.items.push_back({it->path().string(), label, "", -1, {}, {}, 0});
    }
  }
  RT_REQUIRE_INPUT(!listing.items.empty(), "--input ", dir,
                   ": no images (expected one folder per class: ", dir, "/<class>/<image>)");
  sort_and_check_unique(listing);
  return listing;
}

ImageListing read_label_csv(const std::string& csv) {
  std::ifstream in(csv);
  RT_REQUIRE_INPUT(in, "--labels ", csv, ": cannot open");
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ImageListing listing;
  listing.fiber_columns = line == "path,label,multi_hot,pass,zone_pass";
  RT_REQUIRE_INPUT(listing.fiber_columns || line == "path,label", csv,
                   ":1: the header must be 'path,label' or 'path,label,multi_hot,pass,zone_pass'");
  const size_t columns = listing.fiber_columns ? 5 : 2;
  const fs::path base = fs::path(csv).parent_path();
  for (int number = 2; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = str(csv, ":", number, ": ");
    const std::vector<std::string> fields = split_on(line, ',');
    RT_REQUIRE_INPUT(fields.size() == columns, where, "expected ", columns, " fields, found ",
                     fields.size());
    listing.items.push_back(csv_row(where, fields, base, listing.fiber_columns));
  }
  RT_REQUIRE_INPUT(!listing.items.empty(), csv, ": no rows after the header");
  sort_and_check_unique(listing);
  return listing;
}

std::vector<std::string> assign_classes(ImageListing& listing,
                                        const std::vector<std::string>& given, bool skip_bad,
                                        std::vector<std::string>* skipped) {
  std::vector<std::string> names = given;
  if (names.empty()) {
    for (const ImageItem& item : listing.items) names.push_back(item.label);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < names.size(); ++i) {
    RT_REQUIRE_INPUT(index.emplace(names[i], int(i)).second, "--classes: '", names[i],
                     "' is listed twice");
  }
  std::vector<ImageItem> kept;
  for (ImageItem& item : listing.items) {
    const std::string why = problem(item, index, names, listing.fiber_columns);
    RT_REQUIRE_INPUT(why.empty() || skip_bad, why);
    if (!why.empty()) {
      skipped->push_back(why);
      continue;
    }
    item.class_index = index.at(item.label);
    kept.push_back(std::move(item));
  }
  listing.items = std::move(kept);
  return names;
}

std::vector<int> stratified_split(const std::vector<ImageItem>& items, int classes,
                                  double val_fraction, double test_fraction, uint64_t seed) {
  std::vector<std::vector<size_t>> by_class(size_t(std::max(classes, 0)));
  for (size_t i = 0; i < items.size(); ++i) by_class.at(size_t(items[i].class_index)).push_back(i);
  std::vector<int> split(items.size(), 0);
  for (int c = 0; c < classes; ++c) {
    std::vector<size_t>& members = by_class[size_t(c)];
    std::sort(members.begin(), members.end(),
              [&](size_t a, size_t b) { return items[a].path < items[b].path; });
    // Fisher-Yates with our own index draw: std::shuffle's is not the same everywhere.
    std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * uint64_t(c + 1)));
    for (size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng() % i]);
    const double n = double(members.size());
    const size_t test = size_t(std::llround(n * test_fraction));
    const size_t val = std::min(members.size() - test, size_t(std::llround(n * val_fraction)));
    for (size_t k = 0; k < members.size(); ++k)
      split[members[k]] = k < test ? 2 : k < test + val ? 1 : 0;
  }
  return split;
}

}  // namespace ringtrain::data::shard
