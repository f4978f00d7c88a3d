// rt-loader-bench.cpp — how fast one loader thread delivers batches from a split's shards.
//
// ShardSet reads and the loader (sequential, shuffled, shuffled+augmented) against one
// H5Dread per batch over a union of hyperslabs, the textbook way.
// Prints a table of medians and writes JSON lines to output/bench/loader.jsonl.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "bench/bench.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/shard/format.hpp"

namespace po = boost::program_options;
using namespace ringtrain;

namespace {

struct Options {
  std::string dir, split;
  int batch = 128, steps = 100, repeats = 5;
  size_t cache_bytes = data::ShardSet::kDefaultChunkCacheBytes;
};

struct Row {
  std::string mode;
  double median_img_s = 0, other_cores = 0;
};

// Images per second of a loader run over `steps` batches, median of repeats.
Row measure(const std::string& mode, int repeats, const std::function<int64_t(int)>& run) {
  std::vector<double> rates;
  double other = 0;
  for (int r = 0; r < repeats; ++r) {
    bench::OtherCpu cpu;
    Stopwatch clock;
    const int64_t images = run(r);
    const double wall = clock.seconds();
    rates.push_back(double(images) / wall);
    other = std::max(other, cpu.cores(wall));
  }
  return {mode, median(rates), other};
}

int64_t loader_run(const Options& o, bool shuffle, bool augment, int epoch) {
  data::LoaderOptions lo;
  lo.batch_per_rank = o.batch;
  lo.shuffle = shuffle;
  lo.augment = augment ? data::AugmentKind::kCropFlip : data::AugmentKind::kNone;
  data::Loader loader(data::ShardSet::open(o.dir, o.split, o.cache_bytes), lo);
  loader.start_epoch(epoch);
  data::Batch batch;
  int64_t images = 0;
  for (int s = 0; s < o.steps && loader.next(batch); ++s) images += batch.n;
  return images;
}

// The textbook read the ShardSet does not use: per batch and shard, one H5Dread over the
// union (H5S_SELECT_OR) of the batch's rows. Raw HDF5 calls: it exists only to be compared.
int64_t union_run(const Options& o, int epoch) {
  auto set = data::ShardSet::open(o.dir, o.split, o.cache_bytes);
  const auto& info = set.info();
  const auto path = std::filesystem::path(o.dir) / data::shard::file_name(o.split, 0, info.shards);
  const auto file = h5::File::open_read(path.string());
  const auto images = file.root().open_dataset(data::shard::kImages, o.cache_bytes / info.shards);
  const hsize_t rows_in_shard = images.dims()[0];
  data::Sampler sampler(int64_t(rows_in_shard), o.batch, 1, data::Remainder::kDrop, true, 0);
  const auto order = sampler.epoch_order(epoch);
  std::vector<uint8_t> pixels(o.batch * info.image_bytes());
  int64_t images_read = 0;
  for (int s = 0; s < o.steps && s < sampler.steps_per_epoch(0); ++s) {
    auto ids = sampler.step_ids(order, 0, s);
    std::sort(ids.begin(), ids.end());
    h5::Handle space(H5Dget_space(images.id()), H5Sclose);
    hsize_t offset[4] = {0, 0, 0, 0},
            count[4] = {1, hsize_t(info.channels), hsize_t(info.height), hsize_t(info.width)};
    for (size_t i = 0; i < ids.size(); ++i) {
      offset[0] = hsize_t(ids[i]);
      H5Sselect_hyperslab(space.get(), i ? H5S_SELECT_OR : H5S_SELECT_SET, offset, nullptr, count,
                          nullptr);
    }
    count[0] = ids.size();
    h5::Handle memory(H5Screate_simple(4, count, nullptr), H5Sclose);
    RT_CHECK(H5Dread(images.id(), H5T_NATIVE_UINT8, memory.get(), space.get(), H5P_DEFAULT,
                     pixels.data()) >= 0,
             "union read failed");
    images_read += int64_t(ids.size());
  }
  return images_read;
}

// ShardSet::read alone (no thread, no float conversion), shuffled.
int64_t shard_set_run(const Options& o, int epoch) {
  auto set = data::ShardSet::open(o.dir, o.split, o.cache_bytes);
  const auto& info = set.info();
  data::Sampler sampler(info.samples, o.batch, 1, data::Remainder::kDrop, true, 0);
  const auto order = sampler.epoch_order(epoch);
  std::vector<uint8_t> pixels(o.batch * info.image_bytes());
  std::vector<int32_t> labels(o.batch);
  int64_t images = 0;
  for (int s = 0; s < o.steps; ++s) {
    const auto ids = sampler.step_ids(order, 0, s);
    set.read(ids.data(), ids.size(), pixels.data(), labels.data());
    images += int64_t(ids.size());
  }
  return images;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description desc("rt-loader-bench options");
  desc.add_options()("help,h", "print this help and exit")("dir", po::value(&o.dir)->required(),
                                                           "shard directory")(
      "split", po::value(&o.split)->default_value("train"), "split")(
      "batch", po::value(&o.batch)->default_value(128), "batch per rank")(
      "steps", po::value(&o.steps)->default_value(100), "batches per measurement")(
      "repeats", po::value(&o.repeats)->default_value(5), "measurements per mode")(
      "cache-mib", po::value<double>()->default_value(64), "HDF5 chunk cache for the split, MiB");
  return bench::run_bench("rt-loader-bench", [&] {
    po::variables_map vm;
    if (!bench::parse_command_line(argc, argv, desc, vm, "rt-loader-bench --dir DIR [options]"))
      return int(kExitOk);
    o.cache_bytes = size_t(vm["cache-mib"].as<double>() * (1 << 20));
    const auto info = data::ShardSet::open(o.dir, o.split, o.cache_bytes).info();
    std::vector<Row> rows{
        measure("union H5Dread (reference)", o.repeats, [&](int r) { return union_run(o, r); }),
        measure("ShardSet::read, shuffled", o.repeats, [&](int r) { return shard_set_run(o, r); }),
        measure("loader, sequential", o.repeats,
                [&](int r) { return loader_run(o, false, false, r); }),
        measure("loader, shuffled", o.repeats,
                [&](int r) { return loader_run(o, true, false, r); }),
        measure("loader, shuffled+augment", o.repeats,
                [&](int r) { return loader_run(o, true, true, r); })};
    std::printf(
        "loader throughput: %s/%s, %s %dx%dx%d, %lld samples, %d shards, batch %d, "
        "%d steps, chunk cache %.0f MiB, median of %d\n",
        o.dir.c_str(), o.split.c_str(), info.dataset.c_str(), info.channels, info.height,
        info.width, (long long)info.samples, info.shards, o.batch, o.steps,
        o.cache_bytes / 1048576.0, o.repeats);
    std::printf("%-28s %12s %10s %12s\n", "mode", "img/s", "vs ref", "other cores");
    std::filesystem::create_directories("output/bench");
    std::ofstream json("output/bench/loader.jsonl", std::ios::app);
    for (const Row& r : rows) {
      const double ratio = r.median_img_s / rows[0].median_img_s;
      std::printf("%-28s %12.0f %9.2fx %11.2f%s\n", r.mode.c_str(), r.median_img_s, ratio,
                  r.other_cores, r.other_cores > 0.25 ? "  (busy machine)" : "");
      json << "{\"bench\":\"loader\",\"dataset\":\"" << info.dataset << "\",\"mode\":\"" << r.mode
           << "\",\"batch\":" << o.batch << ",\"img_per_s\":" << r.median_img_s
           << ",\"ratio_vs_per_row\":" << ratio << ",\"other_cores\":" << r.other_cores
           << ",\"busy\":" << (r.other_cores > 0.25 ? "true" : "false") << "}\n";
    }
    return int(kExitOk);
  });
}
