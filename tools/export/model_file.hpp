// model_file.hpp — a model file read for export: its card (io/model_file.hpp), the step it
// was written at, and the model on the ref backend (exact fp32) with the file's weights.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/io/model_file.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/model_file.hpp"

namespace ringtrain::tools {

struct ModelFile {
  std::string path;
  io::ModelCard card;
  int64_t global_step = 0;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<nn::Model> model;
  bool averaged = false;  // the run's moving average of the weights (train.ema_decay)
};

// An InputError names the file and what it lacks (nn::load_model_file).
ModelFile read_model_file(const std::string& path, nn::ModelWeights weights);

// A host copy of a parameter's or buffer's values, looked up by its full name.
std::vector<float> tensor_values(const ModelFile& file, const std::string& name,
                                 std::vector<int64_t>* shape = nullptr);

}  // namespace ringtrain::tools
