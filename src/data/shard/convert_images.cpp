// convert_images.cpp — `rt-shard images`: check every image (decode in parallel: sizes, train
// statistics), then decode again a window at a time and write the shards, all-or-nothing.
#include "ringtrain/data/shard/convert_images.hpp"

#include <omp.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <regex>

#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/data/image_decode.hpp"
#include "ringtrain/data/shard/format.hpp"
#include "ringtrain/data/shard/writer.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::data::shard {
namespace fs = std::filesystem;

namespace {

const char* const kSplitNames[3] = {"train", "val", "test"};
constexpr size_t kWindowBytes = 64u << 20;  // fitted pixels held per window
constexpr int64_t kProgressImages = 1000;   // progress shows for a pass of this many images ...
constexpr double kProgressSeconds = 2.0;    // ... or once a pass has run this long

// Progress on stderr: a \r line on a terminal, else one line per 10%; silent for short runs.
class Progress {
 public:
  Progress(std::ostream& err, const char* what, int64_t total)
      : err_(err), what_(what), total_(total), tty_(isatty(STDERR_FILENO)) {}
  void update(int64_t done) {
    if (!shown_ && total_ < kProgressImages && clock_.seconds() < kProgressSeconds) return;
    shown_ = true;
    const int tenth = int(10 * done / std::max<int64_t>(total_, 1));
    if (tty_ ? clock_.seconds() - last_ < 0.2 && done < total_ : tenth == tenth_) return;
    tenth_ = tenth;
    last_ = clock_.seconds();
    err_ << (tty_ ? "\r" : "") << "rt-shard: " << what_ << " " << done << "/" << total_
         << " images (" << 100 * done / std::max<int64_t>(total_, 1) << "%)"
         << (tty_ && done < total_ ? "" : "\n") << std::flush;
  }

 private:
  std::ostream& err_;
  const char* what_;
  int64_t total_;
  bool tty_, shown_ = false;
  int tenth_ = 0;  // the first line at 10%
  double last_ = -1;
  Stopwatch clock_;
};

// One image decoded and fitted, or why it could not be.
struct Fitted {
  std::vector<uint8_t> pixels;              // CHW
  int width = 0, height = 0, channels = 0;  // as decoded
  std::string error;                        // an InputError's line
  bool input_error = true;  // false: a failure of ours or the system's, never skipped
};

// Decodes and fits items[order[first + i]] for i < n on `threads` threads, in any order; the
// results land in their own slots, so what is written next does not depend on the threads.
std::vector<Fitted> decode_window(const std::vector<ImageItem>& items,
                                  const std::vector<size_t>& order, size_t first, size_t n,
                                  int channels, int size, int threads, int64_t max_pixels) {
  std::vector<Fitted> out(n);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (long i = 0; i < long(n); ++i) {
    Fitted& f = out[size_t(i)];
    const std::string& path = items[order[first + size_t(i)]].path;
    try {
      const data::Image image = data::decode_image(path, max_pixels);
      f.width = image.width;
      f.height = image.height;
      f.channels = image.channels;
      f.pixels = data::fit_image(image, channels, size);
    } catch (const InputError& e) {
      f.error = e.what();
    } catch (const std::exception& e) {
      f.error = str(path, ": ", e.what());
      f.input_error = false;
    }
  }
  return out;
}

// The settings every image is held to: the first readable image's channels and, without
// --size, its width and height.
struct Reference {
  std::string path;
  int channels = 0, width = 0, height = 0;
};

// Exact integer pixel sums per channel, so the statistics do not depend on threads or order.
struct ChannelSums {
  std::array<uint64_t, 3> sum{}, sum_sq{};
  void add(const std::vector<uint8_t>& chw, int channels) {
    const size_t plane = chw.size() / size_t(channels);
    for (int c = 0; c < channels; ++c)
      for (size_t i = 0; i < plane; ++i) {
        const uint64_t v = chw[size_t(c) * plane + i];
        sum[size_t(c)] += v;
        sum_sq[size_t(c)] += v * v;
      }
  }
};

// Everything the run decides before writing.
struct Plan {
  std::vector<std::string> class_names;
  std::vector<ImageItem> items;
  std::vector<size_t> splits[3];  // indices into items, in path order
  int channels = 0, side_w = 0, side_h = 0;
  std::vector<float> mean, std;
  bool fiber_columns = false;
  std::vector<std::string> skipped;
};

class Converter {
 public:
  Converter(const ImagesOptions& o, std::ostream& out, std::ostream& progress)
      : o_(o),
        out_(out),
        progress_(progress),
        threads_(o.threads > 0 ? o.threads : std::max(1, omp_get_max_threads())) {}

  std::vector<std::string> run();

 private:
  void list();
  Reference find_reference();
  void check_all(const Reference& ref);
  void split_and_stats(const std::vector<ChannelSums>& sums);
  void require_split_sizes(const std::vector<int>& split) const;
  void bad(const std::string& line);
  size_t window_items() const;
  std::string write_shard(const std::string& staging, int split, int shard, Progress& progress);
  std::vector<std::string> write_all();
  void report(double check_s, double write_s) const;
  void set_attributes(h5::Group& root, int split, int shard, int64_t first) const;

  const ImagesOptions& o_;
  std::ostream& out_;
  std::ostream& progress_;
  const int threads_;
  Plan plan_;
  int64_t written_ = 0;
};

void Converter::bad(const std::string& line) {
  RT_REQUIRE_INPUT(o_.skip_bad, line);
  plan_.skipped.push_back(line);
}

void Converter::list() {
  ImageListing listing =
      o_.labels_csv.empty() ? list_image_folder(o_.input_dir) : read_label_csv(o_.labels_csv);
  plan_.class_names = assign_classes(listing, o_.classes, o_.skip_bad, &plan_.skipped);
  plan_.items = std::move(listing.items);
  plan_.fiber_columns = listing.fiber_columns;
}

// Images decoded per step: at most kWindowBytes of fitted pixels, and a twentieth of the
// dataset, so that progress moves in steps of 5% or less; at least one per thread.
size_t Converter::window_items() const {
  const size_t bytes = size_t(std::max(plan_.channels, 1)) * plan_.side_w * plan_.side_h;
  const size_t most = std::min(kWindowBytes / std::max<size_t>(bytes, 1), plan_.items.size() / 20);
  return std::max(most, size_t(threads_));
}

Reference Converter::find_reference() {
  for (size_t i = 0; i < plan_.items.size(); ++i) {
    const std::vector<size_t> one{i};
    Fitted f = std::move(decode_window(plan_.items, one, 0, 1, 1, 0, 1, o_.max_pixels)[0]);
    if (f.error.empty()) {
      Reference ref{plan_.items[i].path, o_.channels ? o_.channels : f.channels, f.width, f.height};
      plan_.channels = ref.channels;
      plan_.side_w = o_.size ? o_.size : f.width;
      plan_.side_h = o_.size ? o_.size : f.height;
      plan_.items.erase(plan_.items.begin(), plan_.items.begin() + long(i));  // skipped already
      return ref;
    }
    if (!f.input_error) throw Error(f.error);
    bad(f.error);
  }
  throw InputError(str("no usable image: all ", plan_.skipped.size(), " listed were bad"));
}

void Converter::check_all(const Reference& ref) {
  const size_t n = plan_.items.size(), window = window_items();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::vector<ChannelSums> sums(n);
  std::vector<char> good(n, 0);
  Progress progress(progress_, "checked", int64_t(n));
  for (size_t first = 0; first < n; first += window) {
    const size_t m = std::min(window, n - first);
    std::vector<Fitted> fitted = decode_window(plan_.items, order, first, m, plan_.channels,
                                               o_.size, threads_, o_.max_pixels);
    for (size_t i = 0; i < m; ++i) {
      const Fitted& f = fitted[i];
      if (!f.error.empty() && !f.input_error) throw Error(f.error);
      if (!f.error.empty()) {
        bad(f.error);
      } else if (o_.size == 0 && (f.width != ref.width || f.height != ref.height)) {
        bad(str(plan_.items[first + i].path, ": is ", f.width, "x", f.height, ", but ", ref.path,
                " is ", ref.width, "x", ref.height,
                " (give --size to resize and crop all to one)"));
      } else {
        sums[first + i].add(f.pixels, plan_.channels);
        good[first + i] = 1;
      }
    }
    progress.update(int64_t(first + m));
  }
  std::vector<ImageItem> kept;
  std::vector<ChannelSums> kept_sums;
  for (size_t i = 0; i < n; ++i)
    if (good[i]) kept.push_back(std::move(plan_.items[i])), kept_sums.push_back(sums[i]);
  plan_.items = std::move(kept);
  split_and_stats(kept_sums);
}

// A train split, and every split that is not empty at least one image per shard.
void Converter::require_split_sizes(const std::vector<int>& split) const {
  size_t count[3] = {0, 0, 0};
  for (int s : split) ++count[s];
  RT_REQUIRE_INPUT(count[0] > 0, "--val-fraction ", o_.val_fraction, " and --test-fraction ",
                   o_.test_fraction, " leave no training images");
  for (int s = 0; s < 3; ++s)
    RT_REQUIRE_INPUT(count[s] == 0 || count[s] >= size_t(o_.shards), "--shards ", o_.shards,
                     ": the ", kSplitNames[s], " split has only ", count[s],
                     " images (every shard needs one)");
}

// Mean and (population) std per channel over the train split, in pixel/255 units.
void Converter::split_and_stats(const std::vector<ChannelSums>& sums) {
  const std::vector<int> split = stratified_split(plan_.items, int(plan_.class_names.size()),
                                                  o_.val_fraction, o_.test_fraction, o_.seed);
  ChannelSums train;
  for (size_t i = 0; i < split.size(); ++i) {
    plan_.splits[split[i]].push_back(i);
    if (split[i] != 0) continue;
    for (size_t c = 0; c < 3; ++c) {
      train.sum[c] += sums[i].sum[c];
      train.sum_sq[c] += sums[i].sum_sq[c];
    }
  }
  require_split_sizes(split);
  const double count = double(plan_.splits[0].size()) * plan_.side_w * plan_.side_h;
  for (size_t c = 0; c < size_t(plan_.channels); ++c) {
    const double m = double(train.sum[c]) / count;
    const double var = double(train.sum_sq[c]) / count - m * m;
    plan_.mean.push_back(float(m / 255.0));
    plan_.std.push_back(float(std::sqrt(std::max(var, 0.0)) / 255.0));
  }
}

void Converter::set_attributes(h5::Group& root, int split, int shard, int64_t first) const {
  root.set_attr(kAttrFormat, kFormatName);
  root.set_attr(kAttrFormatVersion, kFormatVersion);
  root.set_attr(kAttrDataset, o_.dataset);
  root.set_attr(kAttrSplit, kSplitNames[split]);
  root.set_attr(kAttrClassNames, plan_.class_names);
  root.set_attr(kAttrMean, plan_.mean);
  root.set_attr(kAttrStd, plan_.std);
  root.set_attr(kAttrShardIndex, int32_t(shard));
  root.set_attr(kAttrShardCount, int32_t(o_.shards));
  root.set_attr(kAttrFirstSample, first);
  root.set_attr(kAttrSplitSamples, int64_t(plan_.splits[split].size()));
  root.set_attr("stats_from", "train");
  root.set_attr("source", o_.labels_csv.empty() ? o_.input_dir : o_.labels_csv);
  root.set_attr("resize", o_.size
                              ? str("shorter side to ", o_.size,
                                    " (area average shrinking, bilinear enlarging), centre crop ",
                                    o_.size, "x", o_.size)
                              : std::string("none"));
}

// The rows of one window, gathered for one write per dataset.
struct Rows {
  std::vector<uint8_t> images, multi_hot, pass, zone_pass;
  std::vector<int32_t> labels;
};

// The datasets of one shard; closed (by going out of scope) before the file is committed.
struct ShardDatasets {
  h5::Dataset images, labels;
  std::unique_ptr<h5::Dataset> multi_hot, pass, zone_pass;
  void write(hsize_t row, hsize_t n, const Rows& r) {
    images.write_rows(row, n, r.images.data());
    labels.write_rows(row, n, r.labels.data());
    if (!multi_hot) return;
    multi_hot->write_rows(row, n, r.multi_hot.data());
    pass->write_rows(row, n, r.pass.data());
    zone_pass->write_rows(row, n, r.zone_pass.data());
  }
};

ShardDatasets create_datasets(h5::Group& root, hsize_t rows, const Plan& p) {
  const hsize_t c = hsize_t(p.channels), h = hsize_t(p.side_h), w = hsize_t(p.side_w);
  ShardDatasets d{root.create_dataset<uint8_t>(kImages, {rows, c, h, w},
                                               hsize_t(default_chunk_rows(size_t(c * h * w)))),
                  root.create_dataset<int32_t>(kLabels, {rows}, 4096), nullptr, nullptr, nullptr};
  if (!p.fiber_columns) return d;
  const hsize_t k = p.class_names.size();
  // The datasets and names rt-fibergen writes, so the fiber heads train on real photos.
  d.multi_hot =
      std::make_unique<h5::Dataset>(root.create_dataset<uint8_t>("multi_hot", {rows, k}, 4096));
  d.pass = std::make_unique<h5::Dataset>(root.create_dataset<uint8_t>("pass", {rows}, 4096));
  d.zone_pass =
      std::make_unique<h5::Dataset>(root.create_dataset<uint8_t>("zone_pass", {rows, 4}, 4096));
  d.multi_hot->set_attr("names", p.class_names);
  d.zone_pass->set_attr("names", std::vector<std::string>{"A", "B", "C", "D"});
  return d;
}

Rows gather(const Plan& p, const std::vector<size_t>& order, size_t first,
            std::vector<Fitted>& fitted) {
  Rows r;
  for (size_t i = 0; i < fitted.size(); ++i) {
    const Fitted& f = fitted[i];
    const ImageItem& item = p.items[order[first + i]];
    if (!f.error.empty()) {
      if (!f.input_error) throw Error(f.error);
      throw InputError(str(f.error, " (it changed after it was checked)"));
    }
    RT_REQUIRE_INPUT(f.pixels.size() == size_t(p.channels) * p.side_w * p.side_h, item.path,
                     ": changed size after it was checked");
    r.images.insert(r.images.end(), f.pixels.begin(), f.pixels.end());
    r.labels.push_back(item.class_index);
    r.multi_hot.insert(r.multi_hot.end(), item.multi_hot.begin(), item.multi_hot.end());
    r.pass.push_back(item.pass);
    r.zone_pass.insert(r.zone_pass.end(), item.zone_pass.begin(), item.zone_pass.end());
  }
  return r;
}

std::string Converter::write_shard(const std::string& staging, int split, int shard,
                                   Progress& progress) {
  const std::vector<size_t>& order = plan_.splits[split];
  const size_t n = order.size(), first = n * size_t(shard) / size_t(o_.shards);
  const size_t rows = n * size_t(shard + 1) / size_t(o_.shards) - first;
  const std::string name = file_name(kSplitNames[split], shard, o_.shards);
  h5::AtomicFile file((fs::path(staging) / name).string());
  {
    set_attributes(file.root(), split, shard, int64_t(first));
    ShardDatasets datasets = create_datasets(file.root(), rows, plan_);
    const size_t window = window_items();
    for (size_t row = 0; row < rows; row += window) {
      const size_t m = std::min(window, rows - row);
      std::vector<Fitted> fitted = decode_window(plan_.items, order, first + row, m, plan_.channels,
                                                 o_.size, threads_, o_.max_pixels);
      datasets.write(row, m, gather(plan_, order, first + row, fitted));
      written_ += int64_t(m);
      progress.update(written_);
    }
  }
  file.commit();
  return name;
}

// A folder inside the output for the shards until all are written; removed with what is left.
class StagingFolder {
 public:
  explicit StagingFolder(const std::string& output)
      : path_((fs::path(output) / str(".rt-shard-staging-", getpid())).string()) {
    fs::remove_all(path_);
    fs::create_directory(path_);
  }
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;
  ~StagingFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Shard files of the three splits in dir that this run did not write (another shard count, a
// split now empty): left there, they would mix with the new dataset.
void remove_other_shards(const std::string& dir, const std::vector<std::string>& written) {
  const std::regex pattern(R"((train|val|test)-\d{5}-of-\d{5}\.h5)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, pattern) &&
        std::find(written.begin(), written.end(), name) == written.end())
      fs::remove(entry.path());
  }
}

std::vector<std::string> Converter::write_all() {
  StagingFolder staging(o_.output_dir);
  Progress progress(progress_, "wrote", int64_t(plan_.items.size()));
  std::vector<std::string> names, paths;
  for (int split = 0; split < 3; ++split)
    for (int shard = 0; !plan_.splits[split].empty() && shard < o_.shards; ++shard)
      names.push_back(write_shard(staging.path(), split, shard, progress));
  for (const std::string& name : names) {
    paths.push_back((fs::path(o_.output_dir) / name).string());
    std::error_code ec;
    fs::rename(fs::path(staging.path()) / name, paths.back(), ec);
    if (!ec) continue;
    for (size_t i = 0; i + 1 < paths.size(); ++i) std::remove(paths[i].c_str());
    throw Error(str(paths.back(), ": cannot move into place (", ec.message(), ")"));
  }
  sync_folder(o_.output_dir);  // the renames durable: a crash after success keeps the files
  remove_other_shards(o_.output_dir, names);
  return paths;
}

void Converter::report(double check_s, double write_s) const {
  for (const std::string& line : plan_.skipped) progress_ << "rt-shard: skipped " << line << "\n";
  if (o_.skip_bad) progress_ << "rt-shard: skipped " << plan_.skipped.size() << " bad images\n";
  const double n = double(plan_.items.size());
  auto seconds = [](double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f s", s);
    return std::string(text);
  };
  out_ << str("rt-shard: images: train ", plan_.splits[0].size(), ", val ", plan_.splits[1].size(),
              ", test ", plan_.splits[2].size(), "; ", plan_.class_names.size(), " classes; ",
              plan_.channels, "x", plan_.side_h, "x", plan_.side_w, "; skipped ",
              plan_.skipped.size(), "; ", threads_, " threads: checked in ", seconds(check_s), " (",
              std::lround(n / std::max(check_s, 1e-9)), " images/s), wrote in ", seconds(write_s),
              " (", std::lround(n / std::max(write_s, 1e-9)), " images/s)\n");
}

std::vector<std::string> Converter::run() {
  OutputDirectory output(o_.output_dir, "--output");
  const Stopwatch clock;
  list();
  // Without --skip-bad the listed images are the ones written (any bad one stops the run), so
  // the split's sizes are known before anything is decoded.
  if (!o_.skip_bad)
    require_split_sizes(stratified_split(plan_.items, int(plan_.class_names.size()),
                                         o_.val_fraction, o_.test_fraction, o_.seed));
  check_all(find_reference());
  const double check_s = clock.seconds();
  std::vector<std::string> files = write_all();
  output.keep();
  report(check_s, clock.seconds() - check_s);
  return files;
}

void validate(const ImagesOptions& o) {
  RT_REQUIRE_INPUT(o.input_dir.empty() != o.labels_csv.empty(),
                   "give either --input DIR (one folder per class) or --labels FILE.csv");
  RT_REQUIRE_INPUT(o.size >= 0 && o.size <= 16384, "--size ", o.size, ": must be 0 to 16384");
  RT_REQUIRE_INPUT(o.channels == 0 || o.channels == 1 || o.channels == 3, "--channels ", o.channels,
                   ": must be 1 or 3");
  RT_REQUIRE_INPUT(o.shards >= 1, "--shards ", o.shards, ": must be at least 1");
  RT_REQUIRE_INPUT(o.threads >= 0, "--threads ", o.threads, ": must be at least 1");
  shard::require_split_fractions(o.val_fraction, o.test_fraction);
  RT_REQUIRE_INPUT(o.val_fraction + o.test_fraction < 1, "--val-fraction ", o.val_fraction,
                   " and --test-fraction ", o.test_fraction, " leave no training images");
}

}  // namespace

std::vector<std::string> convert_images(const ImagesOptions& options, std::ostream& out,
                                        std::ostream& progress) {
  validate(options);
  return Converter(options, out, progress).run();
}

}  // namespace ringtrain::data::shard
