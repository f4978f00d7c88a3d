// generator.cpp — the dataset writer: splits, validation, threaded rendering, HDF5 shards with
// every attribute of data/shard/format.hpp, train statistics, the PNG contact sheet.
#include "ringtrain/fiber/generator.hpp"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <ostream>
#include <thread>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/data/shard/format.hpp"
#include "ringtrain/data/shard/writer.hpp"
#include "ringtrain/fiber/png_folder.hpp"
#include "ringtrain/fiber/png_grid.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::fiber {
namespace {

constexpr int64_t kBlockImages = 512;  // rendered, then written, per step
constexpr int kGridColumns = 6;        // tiles per class in the contact sheet

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Rows of consecutive shards: shard s of k holds [s*n/k, (s+1)*n/k).
int64_t shard_begin(int64_t n, int shard, int shards) {
  return n * shard / shards;
}

// The datasets of one shard, open while its rows are written.
struct ShardWriter {
  std::unique_ptr<h5::AtomicFile> file;
  h5::Dataset images, labels, multi_hot, pass, zone_pass, fiber;
  int64_t rows;
  // Datasets must close before the file does, or HDF5 keeps it open past the rename.
  void close_datasets() {
    for (h5::Dataset* d : {&images, &labels, &multi_hot, &pass, &zone_pass, &fiber})
      *d = h5::Dataset(h5::Handle(), "", "");
  }
};

ShardWriter open_shard(const std::string& path, int64_t rows, int size) {
  auto file = std::make_unique<h5::AtomicFile>(path);
  h5::Group& root = file->root();
  const hsize_t n = hsize_t(rows), side = hsize_t(size);
  const hsize_t chunk = std::max<hsize_t>(1, (1u << 20) / (side * side));  // ~1 MiB of images
  ShardWriter w{nullptr,
                root.create_dataset<uint8_t>(data::shard::kImages, {n, 1, side, side}, chunk),
                root.create_dataset<int32_t>(data::shard::kLabels, {n}, 4096),
                root.create_dataset<uint8_t>("multi_hot", {n, kClasses}, 4096),
                root.create_dataset<uint8_t>("pass", {n}, 4096),
                root.create_dataset<uint8_t>("zone_pass", {n, kZones}, 4096),
                root.create_dataset<uint8_t>("fiber_type", {n}, 4096),
                rows};
  w.multi_hot.set_attr("names", class_names());
  w.zone_pass.set_attr("names", std::vector<std::string>{"A", "B", "C", "D"});
  std::vector<std::string> fibers;
  for (int t = 0; t < kFiberTypes; ++t) fibers.push_back(fiber_type_name(FiberType(t)));
  w.fiber.set_attr("names", fibers);
  w.file = std::move(file);
  return w;
}

void write_block(ShardWriter& w, int64_t row, const std::vector<Sample>& block, int size) {
  const size_t n = block.size(), pixels = size_t(size) * size;
  std::vector<uint8_t> images(n * pixels), multi(n * kClasses), pass(n), zones(n * kZones),
      fiber(n);
  std::vector<int32_t> labels(n);
  for (size_t i = 0; i < n; ++i) {
    const Sample& s = block[i];
    std::copy(s.pixels.begin(), s.pixels.end(), images.begin() + i * pixels);
    std::copy(s.multi_hot.begin(), s.multi_hot.end(), multi.begin() + i * kClasses);
    std::copy(s.zone_pass.begin(), s.zone_pass.end(), zones.begin() + i * kZones);
    labels[i] = s.label;
    pass[i] = s.pass;
    fiber[i] = uint8_t(s.fiber);
  }
  w.images.write_rows(row, n, images.data());
  w.labels.write_rows(row, n, labels.data());
  w.multi_hot.write_rows(row, n, multi.data());
  w.pass.write_rows(row, n, pass.data());
  w.zone_pass.write_rows(row, n, zones.data());
  w.fiber.write_rows(row, n, fiber.data());
}

void set_attributes(h5::Group& root, const DatasetOptions& o, const SplitPlan& split, int shard,
                    int64_t first, float mean, float std) {
  root.set_attr(data::shard::kAttrFormat, data::shard::kFormatName);
  root.set_attr(data::shard::kAttrFormatVersion, data::shard::kFormatVersion);
  root.set_attr(data::shard::kAttrDataset, "fiber");
  root.set_attr(data::shard::kAttrSplit, split.name);
  root.set_attr(data::shard::kAttrClassNames, class_names());
  root.set_attr(data::shard::kAttrMean, std::vector<float>{mean});
  root.set_attr(data::shard::kAttrStd, std::vector<float>{std});
  root.set_attr(data::shard::kAttrShardIndex, int32_t(shard));
  root.set_attr(data::shard::kAttrShardCount, int32_t(o.shards));
  root.set_attr(data::shard::kAttrFirstSample, int64_t(first));
  root.set_attr(data::shard::kAttrSplitSamples, int64_t(split.samples));
  root.set_attr("um_per_pixel", float(kRenderUmPerPixel * kRenderSize / o.size));
  root.set_attr("render_um_per_pixel", float(kRenderUmPerPixel));
  root.set_attr("render_size", int32_t(kRenderSize));
  root.set_attr("fiber_type", fiber_choice_name(o.fiber));
  root.set_attr("generator_seed", uint64_t(o.seed));
  root.set_attr("generator_version", kGeneratorVersion);
  root.set_attr("generator", "rt-fibergen");
}

// Exact integer sums over the train images, so the statistics do not depend on shard or thread
// counts.
struct PixelStats {
  uint64_t sum = 0, sum_sq = 0, count = 0;
  void add(const std::vector<uint8_t>& px) {
    for (uint8_t v : px) sum += v, sum_sq += uint64_t(v) * v;
    count += px.size();
  }
  float mean() const { return count ? float(double(sum) / count / 255) : 0.0f; }
  float std() const {
    if (!count) return 1.0f;
    double m = double(sum) / count, var = double(sum_sq) / count - m * m;
    return float(std::sqrt(std::max(0.0, var)) / 255);
  }
};

void require_png_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  RT_REQUIRE_INPUT(
      std::filesystem::is_directory(parent) && access(parent.c_str(), W_OK | X_OK) == 0,
      "--png-grid ", path, ": directory ", parent.string(), " does not exist or is not writable");
}

// "12.3 GiB", for messages about disk space.
std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

// Refuses a run whose shards would not fit on the output's file system. The shards stay temp
// files until all are written, so the whole dataset must fit at once. Touches no file: the
// output directory may not exist yet, so its nearest existing ancestor is measured.
void require_disk_space(const DatasetOptions& o) {
  std::filesystem::path dir = std::filesystem::absolute(o.output_dir);
  while (!std::filesystem::exists(dir) && dir.has_parent_path() && dir != dir.parent_path())
    dir = dir.parent_path();
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(dir, ec);
  if (ec) return;  // unknown: require_writable_dir and the writes report what is wrong
  // An image and its labels (int32 label, multi_hot[5], pass, zone_pass[4], fiber_type).
  const double bytes_per_image = double(o.size) * o.size + 4 + kClasses + 1 + kZones + 1;
  const double needed = double(o.count) * bytes_per_image;
  RT_REQUIRE_INPUT(needed <= double(space.available), "--count ", o.count,
                   ": the shards need about ", gib_text(needed), " but --output ", o.output_dir,
                   " has ", gib_text(double(space.available)),
                   " free (lower --count or --size, or choose another --output)");
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
  }
  return "a signal";
}

// Removes the temp files a killed rt-fibergen left behind ("<shard>.h5.tmp-<pid>" whose pid is
// gone), so they do not pile up in the output directory.
void remove_stale_temp_files(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const size_t tmp = name.find(".h5.tmp-");
    if (tmp == std::string::npos) continue;
    const std::string split = name.substr(0, name.find('-'));
    if (split != "train" && split != "val" && split != "test") continue;
    const long pid = std::strtol(name.c_str() + tmp + 8, nullptr, 10);
    if (pid > 0 && kill(pid_t(pid), 0) != 0 && errno == ESRCH)
      std::filesystem::remove(entry.path());
  }
}

}  // namespace

std::vector<SplitPlan> plan_splits(const DatasetOptions& o) {
  int64_t val = std::llround(double(o.count) * o.val_fraction);
  int64_t test = std::llround(double(o.count) * o.test_fraction);
  std::vector<SplitPlan> plans;
  for (SplitPlan p : {SplitPlan{"train", 0, o.count - val - test}, SplitPlan{"val", 1, val},
                      SplitPlan{"test", 2, test}})
    if (p.samples > 0) plans.push_back(p);
  return plans;
}

void validate(const DatasetOptions& o) {
  RT_REQUIRE_INPUT(!o.output_dir.empty() || !o.png_dir.empty(),
                   "--output: missing (the directory for the shards)");
  RT_REQUIRE_INPUT(o.count >= 1, "--count ", o.count, ": must be at least 1");
  RT_REQUIRE_INPUT(o.count <= kMaxCount, "--count ", o.count, ": must be at most ", kMaxCount,
                   " (write a larger set as several runs, each with its own --seed and --output)");
  RT_REQUIRE_INPUT(o.size == 64 || o.size == 128 || o.size == 256, "--size ", o.size,
                   ": must be 64, 128 or 256");
  RT_REQUIRE_INPUT(o.shards >= 1, "--shards ", o.shards, ": must be at least 1");
  RT_REQUIRE_INPUT(o.threads >= 0, "--threads ", o.threads, ": must be at least 1");
  data::shard::require_split_fractions(o.val_fraction, o.test_fraction);
  const auto splits = plan_splits(o);
  RT_REQUIRE_INPUT(!splits.empty() && splits[0].name == "train", "--count ", o.count,
                   " with --val-fraction ", o.val_fraction, " and --test-fraction ",
                   o.test_fraction, ": leaves no training images");
  for (const SplitPlan& s : splits)
    RT_REQUIRE_INPUT(s.samples >= o.shards, "--shards ", o.shards, ": the ", s.name,
                     " split has only ", s.samples,
                     " images (every shard needs one; raise --count or lower --shards)");
}

Stopped::Stopped(int signal)
    : Error(str("stopped by ", signal_name(signal),
                " before the shards were committed (no shard written)")),
      signal_(signal) {}

std::vector<Sample> render_range(uint64_t seed, int split, int64_t first, int64_t count,
                                 const RenderOptions& options, int threads) {
  std::vector<Sample> out(size_t(std::max<int64_t>(count, 0)));
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < count;)
        out[size_t(i)] = render_sample(seed, split, uint64_t(first + i), options);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  const int n = int(std::min<int64_t>(std::max(1, threads), std::max<int64_t>(count, 1)));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return out;
}

namespace {

// One run of the generator: renders each split into its shards, keeps the train statistics and
// the contact sheet's tiles, and commits every shard once the statistics are known.
class DatasetRun {
 public:
  explicit DatasetRun(const DatasetOptions& o)
      : o_(o),
        render_{o.size, o.fiber, false},
        threads_(o.threads > 0 ? o.threads : available_cores()),
        grid_(kClasses) {
    summary_.splits = plan_splits(o);
  }

  void write_split(const SplitPlan& split, std::ostream* progress) {
    const Stopwatch clock;
    std::unique_ptr<PngFolder> pngs;
    if (!o_.png_dir.empty()) pngs = std::make_unique<PngFolder>(o_.png_dir, split.name);
    for (int s = 0; s < o_.shards; ++s) {
      const int64_t begin = shard_begin(split.samples, s, o_.shards);
      const int64_t end = shard_begin(split.samples, s + 1, o_.shards);
      const std::string path =
          (std::filesystem::path(o_.output_dir) / data::shard::file_name(split.name, s, o_.shards))
              .string();
      if (shards_) writers_.push_back(open_shard(path, end - begin, o_.size));
      if (shards_) summary_.files.push_back(path);
      for (int64_t row = begin; row < end; row += kBlockImages) {
        throw_if_stopped();
        const int64_t n = std::min(kBlockImages, end - row);
        std::vector<Sample> block = render_range(o_.seed, split.id, row, n, render_, threads_);
        if (shards_) write_block(writers_.back(), row - begin, block, o_.size);
        for (size_t i = 0; pngs && i < block.size(); ++i)
          pngs->add(row + int64_t(i), block[i], o_.size);
        if (split.id == 0) keep_train(block);
      }
      if (shards_) writers_.back().close_datasets();  // frees their chunk caches until commit
    }
    if (pngs) pngs->finish();
    if (progress)
      *progress << str("  ", split.name, ": ", split.samples, " images in ", o_.shards,
                       " shard(s), ", clock.seconds(), " s\n")
                << std::flush;
  }

  // Gives the run up (the writers' temp files go as the exception unwinds) once a stop signal
  // has come.
  void throw_if_stopped() const {
    if (!o_.stop_signal) return;
    if (const int signal = o_.stop_signal()) throw Stopped(signal);
  }

  // Sets every shard's attributes (the train statistics included) and renames them into place.
  // The last point at which a stop signal gives the run up: once renaming starts, it finishes.
  void commit_all() {
    throw_if_stopped();
    summary_.mean = stats_.mean();
    summary_.std = stats_.std();
    if (!shards_) return;
    size_t w = 0;
    for (const SplitPlan& split : summary_.splits)
      for (int s = 0; s < o_.shards; ++s, ++w)
        set_attributes(writers_[w].file->root(), o_, split, s,
                       shard_begin(split.samples, s, o_.shards), summary_.mean, summary_.std);
    for (ShardWriter& writer : writers_) writer.file->commit();
  }

  void write_grid(const std::string& path) {
    std::vector<GridTile> tiles;
    for (auto& row : grid_)
      for (auto& tile : row) tiles.push_back(std::move(tile));
    if (!tiles.empty()) write_png_grid(path, tiles, kGridColumns);
  }

  DatasetSummary& summary() { return summary_; }

 private:
  void keep_train(std::vector<Sample>& block) {
    for (Sample& sample : block) {
      stats_.add(sample.pixels);
      auto& tiles = grid_[sample.label];
      if (int(tiles.size()) < kGridColumns)
        tiles.push_back(
            {std::move(sample.pixels), o_.size, sample.label, sample.pass != 0, sample.fiber});
    }
  }

  const DatasetOptions& o_;
  const RenderOptions render_;
  const int threads_;
  DatasetSummary summary_;
  PixelStats stats_;
  std::vector<std::vector<GridTile>> grid_;     // the first train images of each class
  std::vector<ShardWriter> writers_;            // all stay open (as temp files) until commit_all
  const bool shards_ = !o_.output_dir.empty();  // false: --png-dir alone, PNGs only
};

}  // namespace

DatasetSummary generate_dataset(const DatasetOptions& options, std::ostream* progress) {
  validate(options);
  if (!options.output_dir.empty()) {
    require_disk_space(options);
    h5::require_writable_dir(options.output_dir, "--output");
  }
  if (!options.png_grid.empty()) require_png_dir(options.png_grid);
  if (!options.png_dir.empty()) h5::require_writable_dir(options.png_dir, "--png-dir");
  if (!options.output_dir.empty()) remove_stale_temp_files(options.output_dir);

  const Stopwatch clock;
  DatasetRun run(options);
  for (const SplitPlan& split : run.summary().splits) run.write_split(split, progress);
  run.commit_all();
  if (!options.png_grid.empty()) run.write_grid(options.png_grid);
  run.summary().seconds = clock.seconds();
  return run.summary();
}

}  // namespace ringtrain::fiber
