// generator.hpp — rt-fibergen as a library: options, validation, multithreaded rendering of
// image ranges, and the dataset writer (train/val/test splits as HDF5 shards).
//
// defines: DatasetOptions, SplitPlan, plan_splits(), validate(), render_range(),
//          DatasetSummary, generate_dataset(), run_fibergen()
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ringtrain/fiber/render.hpp"

namespace ringtrain::fiber {

struct DatasetOptions {
  std::string output_dir;
  int64_t count = 0;  // images over all splits
  uint64_t seed = 0;
  int size = 64;
  int shards = 1;  // per split
  FiberChoice fiber = FiberChoice::kSmUpc;
  double val_fraction = 0.1;
  double test_fraction = 0.1;
  std::string png_grid;  // empty: none
  int threads = 0;       // 0: the cores this process may use
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

// Validates, then writes every shard (all committed together at the end, each atomically) and
// the PNG grid when asked. Progress lines go to `progress` when it is not null.
DatasetSummary generate_dataset(const DatasetOptions& options, std::ostream* progress);

// The rt-fibergen command line: returns the exit code (0, 1 on failure, 2 on bad input) after
// printing errors as one line "rt-fibergen: error: ..." to err.
int run_fibergen(int argc, const char* const argv[], std::ostream& out, std::ostream& err);

}  // namespace ringtrain::fiber
