// predict.hpp — ringtrain predict: a model file applied to shards, image files or folders of
// them on any number of ranks; rank 0 writes one CSV and one HDF5 file, rows in input order.
#pragma once

#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/data/image_decode.hpp"

namespace ringtrain::predict {

struct PredictOptions {
  std::string model;                      // a checkpoint (the model file), format_version 2
  std::vector<std::string> inputs;        // shard files (.h5), image files, folders of either
  std::string output = "output/predict";  // writes <output>.csv and <output>.h5
  int top_k = 0;                          // 0: min(3, classes)
  int batch = 64;                         // images per forward
  std::string weights = "averaged";       // averaged (the run's moving average if kept) | raw
  std::string tta = "none";               // none | flip | dihedral: probabilities averaged
  int64_t max_pixels = data::kDefaultMaxPixels;  // a larger image file (by its header) is refused
  TrainConfig device;                            // backend, precision, threads (and the cuda keys)
};

// What the command line after `predict` asked for; help: print help_text and exit 0.
struct PredictCommandLine {
  PredictOptions options;
  bool help = false;
  std::string help_text;
};

// argv[0] is "predict". --deck FILE takes train.backend, train.precision, train.threads
// (and the cuda keys) from a deck; --backend, --precision and --threads override it. Bad
// input throws InputError with one line naming the flag and value.
PredictCommandLine parse_predict_command_line(int argc, const char* const argv[]);

// Collective: every rank takes its share of the inputs (whole batches, contiguous, so each
// image's numbers do not depend on the world size), rank 0 gathers and writes
// <output>.csv and <output>.h5 atomically.
void predict(const PredictOptions& options, comm::Communicator& comm);

// `ringtrain predict ...` behind run_app: the exit code (2 for bad input on every rank).
int run_predict(int argc, char** argv, comm::Communicator& comm);

}  // namespace ringtrain::predict
