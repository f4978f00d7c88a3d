// model_file.hpp — a model file (a checkpoint of format_version 2, io/model_file.hpp) loaded for
// inference: its card and the model, built with its heads and holding the file's weights and
// (rank 0's) BN running statistics. ringtrain predict and rt-export share it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/io/model_file.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {

struct LoadedModel {
  io::ModelCard card;
  std::unique_ptr<Model> model;
  int64_t global_step = 0;  // the training step the weights are from (0 when not recorded)
  bool averaged = false;    // the weights are the run's moving average (train.ema_decay)
};

// Which weights of a model file: its moving average (/ema) where the run kept one, else the
// weights (/params); or the weights whatever the file holds.
enum class ModelWeights { kAveraged, kRaw };
// "averaged" or "raw"; an InputError naming `option` otherwise.
ModelWeights parse_model_weights(const std::string& text, const std::string& option);

// InputError naming the file when it is not HDF5 or not a model file; a version-1 checkpoint's
// message ends with resave_hint.
LoadedModel load_model_file(const std::string& path, Backend& be, const std::string& resave_hint,
                            ModelWeights weights = ModelWeights::kAveraged);

}  // namespace ringtrain::nn
