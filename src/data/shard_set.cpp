// shard_set.cpp — opening and checking a split's shards, and batched reads of sample ids.
#include "ringtrain/data/shard_set.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/format.hpp"

namespace ringtrain::data {
namespace fs = std::filesystem;

std::string recreate_hint(const std::string& dataset, const std::string& dir) {
  if (dataset == "fiber")
    return "re-create it with: rt-fibergen --output " + dir + " --count N --seed S";
  if (dataset == "cifar10")
    return "re-create it with: rt-shard cifar10 --input CIFAR_DIR --output " + dir;
  if (dataset == "fashion_mnist")
    return "re-create it with: rt-shard fashion-mnist --output " + dir;
  if (!dataset.empty())
    return "re-create it with: rt-shard idx --images F --labels F --dataset " + dataset +
           " --output " + dir;
  return "re-create it with rt-shard (CIFAR-10, IDX) or rt-fibergen (fiber) --output " + dir;
}

std::string split_files(const DatasetInfo& info) {
  const std::string one = shard::file_name(info.split, 0, info.shards);
  if (info.shards == 1) return (fs::path(info.directory) / one).string();
  // <split>-00000-of-K.h5 -> <split>-*-of-K.h5
  const std::string glob = info.split + "-*" + one.substr(info.split.size() + 6);
  return (fs::path(info.directory) / glob).string();
}

namespace {

// "height 64 in <val files>, 128 in <train files>; <hint>" as the InputError of a split
// that does not match the train split.
template <typename Value>
void require_same(const Value& trained, const Value& here, const std::string& property,
                  const DatasetInfo& train_info, const DatasetInfo& info) {
  RT_REQUIRE_INPUT(here == trained, "split '", info.split, "' does not match split '",
                   train_info.split, "': ", property, " ", here, " in ", split_files(info), ", ",
                   trained, " in ", split_files(train_info), "; ",
                   recreate_hint(info.dataset, info.directory));
}

}  // namespace

void check_same_layout(const DatasetInfo& trained, const DatasetInfo& split) {
  require_same(trained.channels, split.channels, "channels", trained, split);
  require_same(trained.height, split.height, "height", trained, split);
  require_same(trained.width, split.width, "width", trained, split);
  require_same(trained.classes, split.classes, "classes", trained, split);
  for (size_t c = 0; c < trained.class_names.size() && c < split.class_names.size(); ++c)
    require_same("'" + trained.class_names[c] + "'", "'" + split.class_names[c] + "'",
                 str("class ", c), trained, split);
}

namespace {

const char* type_name(const h5::Dataset& ds) {
  if (ds.holds<uint8_t>()) return "uint8";
  if (ds.holds<int32_t>()) return "int32";
  if (ds.holds<uint32_t>()) return "uint32";
  if (ds.holds<int64_t>()) return "int64";
  if (ds.holds<uint64_t>()) return "uint64";
  if (ds.holds<float>()) return "float32";
  if (ds.holds<double>()) return "float64";
  return "another type";
}

std::string shape_text(const h5::Dims& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// The shard files of a split found in dir, by shard count, each sorted by index.
std::map<int, std::map<int, std::string>> find_shards(const std::string& dir,
                                                      const std::string& split) {
  const std::regex pattern(split + R"(-(\d{5})-of-(\d{5})\.h5)");
  std::map<int, std::map<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern))
      found[std::stoi(m[2].str())][std::stoi(m[1].str())] = entry.path().string();
  }
  return found;
}

std::string read_dataset_name(const h5::File& file) {
  try {
    return file.root().attr_string(shard::kAttrDataset);
  } catch (const Error&) {
    return "";
  }
}

// The checks one file must pass on its own: format, version, datasets, shard attributes.
void check_shard(const h5::File& file, const std::string& split, int index, int count) {
  const auto& root = file.root();
  const std::string& path = file.name();
  RT_REQUIRE_INPUT(root.has_attr(shard::kAttrFormat), path, ": attribute ", shard::kAttrFormat,
                   " is missing (not a ringtrain shard)");
  const std::string format = root.attr_string(shard::kAttrFormat);
  RT_REQUIRE_INPUT(format == shard::kFormatName, path, ": format is '", format, "', expected '",
                   shard::kFormatName, "' (not a ringtrain shard)");
  const int32_t version = root.attr<int32_t>(shard::kAttrFormatVersion);
  RT_REQUIRE_INPUT(version == shard::kFormatVersion, path, ": format_version is ", version,
                   ", this ringtrain reads version ", shard::kFormatVersion);
  const std::string stored_split = root.attr_string(shard::kAttrSplit);
  RT_REQUIRE_INPUT(stored_split == split, path, ": split is '", stored_split, "', expected '",
                   split, "'");
  const int32_t stored_index = root.attr<int32_t>(shard::kAttrShardIndex);
  const int32_t stored_count = root.attr<int32_t>(shard::kAttrShardCount);
  RT_REQUIRE_INPUT(stored_index == index && stored_count == count, path, ": shard_index/count ",
                   "are ", stored_index, "/", stored_count, " but the file name says ", index, "/",
                   count);
  const auto images = root.open_dataset(shard::kImages);
  RT_REQUIRE_INPUT(images.holds<uint8_t>() && images.dims().size() == 4, path,
                   ": /images must be uint8 [N, C, H, W], found ", type_name(images), " ",
                   shape_text(images.dims()));
  const auto labels = root.open_dataset(shard::kLabels);
  const h5::Dims rows{images.dims()[0]};
  RT_REQUIRE_INPUT(labels.holds<int32_t>() && labels.dims() == rows, path,
                   ": /labels must be int32 ", shape_text(rows), " (one per image), found ",
                   type_name(labels), " ", shape_text(labels.dims()));
}

}  // namespace

ShardSet ShardSet::open(const std::string& dir, const std::string& split,
                        size_t chunk_cache_bytes) {
  const std::string any_hint = recreate_hint("", dir);
  RT_REQUIRE_INPUT(fs::is_directory(dir), "shard directory ", dir, " does not exist; create the ",
                   "shards with rt-shard (CIFAR-10, IDX) or rt-fibergen (fiber) --output ", dir);
  const auto found = find_shards(dir, split);
  const std::string pattern = (fs::path(dir) / (split + "-NNNNN-of-NNNNN.h5")).string();
  RT_REQUIRE_INPUT(!found.empty(), "no shards of split '", split, "' in ", dir, " (looked for ",
                   pattern,
                   "); create them with rt-shard (CIFAR-10, IDX) or rt-fibergen "
                   "(fiber) --output ",
                   dir);
  RT_REQUIRE_INPUT(found.size() == 1, dir, ": split '", split, "' has shards of two conversions (",
                   found.begin()->first, " and ", std::next(found.begin())->first,
                   " shards); remove the stale files and ", any_hint);
  const int count = found.begin()->first;
  const auto& files = found.begin()->second;
  RT_REQUIRE_INPUT(files.rbegin()->first < count, files.rbegin()->second, ": shard index ",
                   files.rbegin()->first, " is not below the shard count ", count, "; ", any_hint);

  ShardSet set;
  for (int i = 0; i < count; ++i) {
    const std::string path = (fs::path(dir) / shard::file_name(split, i, count)).string();
    if (!files.count(i)) {
      const std::string dataset = read_dataset_name(h5::File::open_read(files.begin()->second));
      throw InputError(str(path, " is missing (split '", split, "' has ", count, " shards, ",
                           files.size(), " found); ", recreate_hint(dataset, dir)));
    }
    std::string dataset;
    try {
      h5::File file = h5::File::open_read(path);
      dataset = read_dataset_name(file);
      check_shard(file, split, i, count);
      set.add_shard(std::move(file), chunk_cache_bytes / count);
    } catch (const Error& e) {  // InputError included: every message gets the hint
      throw InputError(str(e.what(), "; ", recreate_hint(dataset, dir)));
    }
  }
  set.info_.directory = dir;
  set.info_.shards = count;
  set.requests_.resize(count);
  RT_REQUIRE_INPUT(set.info_.samples > 0, "split '", split, "' in ", dir, " holds no samples (",
                   count, count == 1 ? " shard" : " shards", " of 0 rows); ",
                   recreate_hint(set.info_.dataset, dir));
  return set;
}

ShardSet ShardSet::open_matching(const DatasetInfo& trained, const std::string& dir,
                                 const std::string& split, size_t chunk_cache_bytes) {
  ShardSet set = open(dir, split, chunk_cache_bytes);
  check_same_layout(trained, set.info());
  return set;
}

namespace {

// The split's description as one shard's attributes and /images shape state it.
DatasetInfo read_info(const h5::Group& root, const h5::Dims& dims) {
  DatasetInfo info;
  info.dataset = root.attr_string(shard::kAttrDataset);
  info.split = root.attr_string(shard::kAttrSplit);
  info.samples = root.attr<int64_t>(shard::kAttrSplitSamples);
  info.channels = int(dims[1]);
  info.height = int(dims[2]);
  info.width = int(dims[3]);
  info.class_names = root.attr_strings(shard::kAttrClassNames);
  info.classes = int(info.class_names.size());
  info.mean = root.attr_vector<float>(shard::kAttrMean);
  info.std = root.attr_vector<float>(shard::kAttrStd);
  return info;
}

void check_info(const DatasetInfo& info, const std::vector<int32_t>& labels,
                const std::string& path) {
  RT_REQUIRE_INPUT(info.classes > 0, path, ": class_names is empty");
  RT_REQUIRE_INPUT(info.mean.size() == size_t(info.channels) && info.std.size() == info.mean.size(),
                   path, ": mean and std have ", info.mean.size(), " and ", info.std.size(),
                   " values for ", info.channels, " channels");
  // Every pixel is divided by std and shifted by mean: one inf or nan makes every input,
  // and so every loss, nan.
  for (size_t c = 0; c < info.mean.size(); ++c) {
    RT_REQUIRE_INPUT(std::isfinite(info.mean[c]), path, ": attribute ", shard::kAttrMean, "[", c,
                     "] is ", info.mean[c], ", not a finite number");
    RT_REQUIRE_INPUT(std::isfinite(info.std[c]) && info.std[c] > 0, path, ": attribute ",
                     shard::kAttrStd, "[", c, "] is ", info.std[c],
                     ", not a positive finite number");
  }
  for (size_t row = 0; row < labels.size(); ++row)
    RT_REQUIRE_INPUT(labels[row] >= 0 && labels[row] < info.classes, path, ": row ", row,
                     " has label ", labels[row], ", outside 0..", info.classes - 1, " (",
                     info.classes, " class names)");
}

// A later shard must describe the same split as the first one.
void check_same_split(const DatasetInfo& here, const std::string& path, const DatasetInfo& first,
                      const std::string& first_path) {
  RT_REQUIRE_INPUT(here.dataset == first.dataset, path, ": dataset is '", here.dataset, "', ",
                   first_path, " says '", first.dataset, "'");
  RT_REQUIRE_INPUT(
      here.channels == first.channels && here.height == first.height && here.width == first.width,
      path, ": images are ", here.channels, "x", here.height, "x", here.width, ", ", first_path,
      " holds ", first.channels, "x", first.height, "x", first.width);
  RT_REQUIRE_INPUT(here.class_names == first.class_names, path, ": class_names (", here.classes,
                   ") differ from those of ", first_path, " (", first.classes, ")");
  RT_REQUIRE_INPUT(here.samples == first.samples, path, ": split_samples is ", here.samples, ", ",
                   first_path, " says ", first.samples);
}

}  // namespace

void ShardSet::add_shard(h5::File file, size_t chunk_cache_bytes) {
  const std::string path = file.name();
  Shard shard{path, std::move(file), h5::Dataset(h5::Handle(), path, "/images"), {}, 0, 0, {}};
  shard.stamp = stamp_of(path);
  RT_REQUIRE_INPUT(shard.stamp.error == 0, path, ": cannot stat (",
                   std::strerror(shard.stamp.error), ")");
  const auto& root = shard.file.root();
  shard.images = root.open_dataset(shard::kImages, chunk_cache_bytes);
  shard.labels = root.open_dataset(shard::kLabels).read_all<int32_t>();
  shard.first = root.attr<int64_t>(shard::kAttrFirstSample);
  shard.rows = int64_t(shard.images.dims()[0]);
  const DatasetInfo here = read_info(root, shard.images.dims());
  check_info(here, shard.labels, path);

  const int64_t expected_first = shards_.empty() ? 0 : shards_.back().first + shards_.back().rows;
  RT_REQUIRE_INPUT(shard.first == expected_first, path, ": first_sample is ", shard.first,
                   ", expected ", expected_first, " (where the previous shard ends)");
  if (shards_.empty())
    info_ = here;
  else
    check_same_split(here, path, info_, shards_.front().path);
  const bool last = int(shards_.size()) + 1 == root.attr<int32_t>(shard::kAttrShardCount);
  RT_REQUIRE_INPUT(!last || shard.first + shard.rows == here.samples, path, ": split_samples is ",
                   here.samples, " but the shards hold ", shard.first + shard.rows);
  shards_.push_back(std::move(shard));
}

void ShardSet::group_by_shard(const int64_t* ids, size_t n) {
  for (auto& r : requests_) r.clear();
  for (size_t i = 0; i < n; ++i) {
    RT_CHECK(ids[i] >= 0 && ids[i] < info_.samples, "sample id ", ids[i], " is outside split ",
             info_.split, " of ", info_.samples, " samples");
    // Shards hold consecutive ranges: the last shard whose first sample is <= id.
    auto it = std::upper_bound(shards_.begin(), shards_.end(), ids[i],
                               [](int64_t id, const Shard& s) { return id < s.first; });
    const size_t s = size_t(it - shards_.begin()) - 1;
    requests_[s].push_back({ids[i] - shards_[s].first, i});
  }
  for (auto& r : requests_)
    std::sort(r.begin(), r.end(), [](const Request& a, const Request& b) {
      return a.row < b.row || (a.row == b.row && a.position < b.position);
    });
}

// Collects the distinct rows of one shard's sorted requests into rows_.
void ShardSet::unique_rows(const std::vector<Request>& requests) {
  rows_.clear();
  for (const Request& q : requests)
    if (rows_.empty() || rows_.back() != hsize_t(q.row)) rows_.push_back(hsize_t(q.row));
}

ShardSet::FileStamp ShardSet::stamp_of(const std::string& path) {
  FileStamp stamp;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    stamp.error = errno;
    return stamp;
  }
  stamp.bytes = int64_t(st.st_size);
  stamp.device = uint64_t(st.st_dev);
  stamp.inode = uint64_t(st.st_ino);
  stamp.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return stamp;
}

void ShardSet::check_unchanged(const Shard& shard) {
  const FileStamp& then = shard.stamp;
  const FileStamp now = stamp_of(shard.path);
  const std::string& path = shard.path;
  RT_REQUIRE_INPUT(now.error == 0, "shard ", path, " was removed or renamed while training (",
                   std::strerror(now.error), ")");
  RT_REQUIRE_INPUT(now.bytes == then.bytes, "shard ", path,
                   " was truncated or replaced while training: size ", then.bytes, " -> ",
                   now.bytes, " bytes");
  RT_REQUIRE_INPUT(now.device == then.device && now.inode == then.inode, "shard ", path,
                   " was replaced while training: inode ", then.inode, " -> ", now.inode);
  RT_REQUIRE_INPUT(now.mtime_ns == then.mtime_ns, "shard ", path,
                   " was modified while training: mtime ", then.mtime_ns, " -> ", now.mtime_ns,
                   " ns since 1970");
}

void ShardSet::read_rows_checked(size_t s, const h5::Dataset& ds, size_t row_bytes) {
  scratch_.resize(rows_.size() * row_bytes);
  try {
    ds.read_row_list(rows_, scratch_.data());
  } catch (const Error&) {
    check_unchanged(shards_[s]);  // a file cut under HDF5 can also fail its reads
    throw;
  }
  // Checked after the read, so rows read after (or while) the file changed never pass.
  check_unchanged(shards_[s]);
}

void ShardSet::read(const int64_t* ids, size_t n, uint8_t* images, int32_t* labels) {
  group_by_shard(ids, n);
  const size_t bytes = info_.image_bytes();
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (requests_[s].empty()) continue;
    unique_rows(requests_[s]);
    read_rows_checked(s, shards_[s].images, bytes);
    size_t slot = 0;
    for (const Request& q : requests_[s]) {
      while (rows_[slot] != hsize_t(q.row)) ++slot;
      labels[q.position] = shards_[s].labels[q.row];
      std::memcpy(images + q.position * bytes, scratch_.data() + slot * bytes, bytes);
    }
  }
}

bool ShardSet::has(const std::string& name) const {
  return !shards_.empty() && shards_.front().file.root().exists(name);
}

size_t ShardSet::row_elements(const std::string& name) const {
  RT_REQUIRE_INPUT(has(name), shards_.front().path, ": dataset /", name, " is missing; ",
                   recreate_hint(info_.dataset, info_.directory));
  const h5::Dims dims = shards_.front().file.root().open_dataset(name).dims();
  size_t elements = 1;
  for (size_t i = 1; i < dims.size(); ++i) elements *= dims[i];
  return elements;
}

std::vector<std::string> ShardSet::extra_names(const std::string& name) const {
  if (!has(name)) return {};
  const h5::Dataset ds = shards_.front().file.root().open_dataset(name);
  return ds.has_attr("names") ? ds.attr_strings("names") : std::vector<std::string>{};
}

void ShardSet::read_extra(const std::string& name, const int64_t* ids, size_t n, uint8_t* out) {
  const size_t elements = row_elements(name);
  group_by_shard(ids, n);
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (requests_[s].empty()) continue;
    const h5::Dataset ds = shards_[s].file.root().open_dataset(name);
    RT_REQUIRE_INPUT(
        ds.holds<uint8_t>() && !ds.dims().empty() && ds.dims()[0] == hsize_t(shards_[s].rows),
        shards_[s].path, ": /", name, " must be uint8 with one row per image, found ",
        type_name(ds), " ", shape_text(ds.dims()), "; ",
        recreate_hint(info_.dataset, info_.directory));
    unique_rows(requests_[s]);
    read_rows_checked(s, ds, elements);
    size_t slot = 0;
    for (const Request& q : requests_[s]) {
      while (rows_[slot] != hsize_t(q.row)) ++slot;
      std::memcpy(out + q.position * elements, scratch_.data() + slot * elements, elements);
    }
  }
}

}  // namespace ringtrain::data
