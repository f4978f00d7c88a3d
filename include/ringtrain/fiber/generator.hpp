// generator.hpp — rt-fibergen as a library: options, validation, multithreaded rendering of
// image ranges, and the dataset writer (train/val/test splits as HDF5 shards).
//
// defines: kMaxCount, DatasetOptions, SplitPlan, plan_splits(), validate(), render_range(),
//          DatasetSummary, Stopped, generate_dataset(), run_fibergen()
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/fiber/render.hpp"

namespace ringtrain::fiber {

// The most images one run writes: 0.4 TB at 64 px, 6.6 TB at 256 px (a larger set is several runs
// with their own --seed). Below it, generate_dataset also refuses a run the disk cannot hold.
constexpr int64_t kMaxCount = 100'000'000;

struct DatasetOptions {
  std::string output_dir;
  int64_t count = 0;  // images over all splits: 1 to kMaxCount, and every split fills --shards
  uint64_t seed = 0;
  int size = 64;
  int shards = 1;  // per split
  FiberChoice fiber = FiberChoice::kSmUpc;
  double val_fraction = 0.1;
  double test_fraction = 0.1;
  std::string png_grid;  // empty: none
  // Also every image as DIR/<split>/<class>/<index>.png plus DIR/<split>/labels.csv (empty: none);
  // with output_dir empty, only these (no shards).
  std::string png_dir;
  int threads = 0;  // 0: the cores this process may use
  // Polled between blocks of images: the stop signal received so far, 0 while none (rt-fibergen
  // passes StopSignals::stop_signal). Empty: the run is never stopped.
  std::function<int()> stop_signal;
};

// One split: its name, its id in the image key (0 train, 1 val, 2 test) and its size.
struct SplitPlan {
  std::string name;
  int id;
  int64_t samples;
};
// val = round(count * val_fraction), test likewise, train the rest; empty splits are left out.
std::vector<SplitPlan> plan_splits(const DatasetOptions& options);

// Throws InputError with a one-line message naming the option and its value; touches no file.
void validate(const DatasetOptions& options);

// Images [first, first + count) of a split, rendered on `threads` threads; the result does not
// depend on the thread count.
std::vector<Sample> render_range(uint64_t seed, int split, int64_t first, int64_t count,
                                 const RenderOptions& options, int threads);

struct DatasetSummary {
  std::vector<SplitPlan> splits;
  std::vector<std::string> files;  // every shard written, in split then shard order
  float mean = 0, std = 0;         // train split, pixel / 255
  double seconds = 0;
};

// A run given up on a stop signal before its shards were committed; its temp files are gone.
class Stopped : public Error {
 public:
  explicit Stopped(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Validates, checks that the output's file system has room for the shards, then writes every
// shard (all committed together at the end, each atomically) and the PNG grid when asked.
// Progress lines go to `progress` when it is not null. Throws Stopped when options.stop_signal
// reports a signal before the commit (a signal after it lets the finished run complete).
DatasetSummary generate_dataset(const DatasetOptions& options, std::ostream* progress);

// The rt-fibergen command line: returns the exit code (0, 1 on failure, 2 on bad input, 128 + the
// signal when stopped by SIGTERM, SIGINT or SIGUSR1) after printing errors as one line
// "rt-fibergen: error: ..." to err. Stop signals are polled when main has a StopSignals.
int run_fibergen(int argc, const char* const argv[], std::ostream& out, std::ostream& err);

}  // namespace ringtrain::fiber
