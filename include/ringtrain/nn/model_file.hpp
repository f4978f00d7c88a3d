// model_file.hpp — the one reader of model files (a checkpoint of format_version 2,
// io/model_file.hpp): ringtrain predict and rt-export open a file with it, read its card once,
// and build the model it describes on a backend, holding the file's weights and (rank 0's) BN
// running statistics.
//
// defines: ModelWeights, parse_model_weights(), ModelFile, tensor_values()
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/io/h5.hpp"
#include "ringtrain/io/model_file.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {

// Which weights of a model file: its moving average (/ema) where the run kept one, else the
// weights (/params); or the weights whatever the file holds.
enum class ModelWeights { kAveraged, kRaw };
// "averaged" or "raw"; an InputError naming `option` otherwise.
ModelWeights parse_model_weights(const std::string& text, const std::string& option);

class ModelFile {
 public:
  // InputError naming the file when it is not HDF5 or not a model file (a version-1
  // checkpoint: what it lacks, and io::kResaveHint).
  explicit ModelFile(const std::string& path);

  const std::string& path() const { return path_; }
  const io::ModelCard& card() const { return card_; }
  // The training step the weights are from (0 when not recorded).
  int64_t global_step() const { return global_step_; }
  // Whether build_model(be, weights) loads the run's moving average (train.ema_decay).
  bool averaged(ModelWeights weights) const {
    return weights == ModelWeights::kAveraged && has_average_;
  }
  // The model the card describes, on `be`, with the file's weights (`weights` says which) and
  // BN statistics.
  std::unique_ptr<Model> build_model(Backend& be,
                                     ModelWeights weights = ModelWeights::kAveraged) const;

 private:
  std::string path_;
  h5::File file_;
  io::ModelCard card_;
  int64_t global_step_ = 0;
  bool has_average_ = false;  // the file holds /ema
};

// A host copy of one of the model's parameters or buffers, by its full name ("conv1.weight");
// shape, when given, receives its dimensions. Error naming it when the model has no such one.
std::vector<float> tensor_values(Model& model, const std::string& name,
                                 std::vector<int64_t>* shape = nullptr);

}  // namespace ringtrain::nn
