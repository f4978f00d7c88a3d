// model_file.hpp — a model file (a checkpoint of format_version 2) read for export: what
// the network is and what inference needs around it, and the model itself, built on the ref
// backend with the file's weights and BN statistics.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::tools {

struct ModelFile {
  std::string path;
  std::string model_name, heads;  // "fibernet", "class" | "inspect"
  int channels = 0, height = 0, width = 0;
  std::vector<float> mean, std;  // per channel: input = (pixel / 255 - mean) / std
  std::vector<std::string> class_names;
  std::vector<std::string> defect_names, zone_names;  // inspect heads only
  float pass_threshold = 0.5f;
  int64_t global_step = 0;
  std::string git_commit;

  std::unique_ptr<backend::Backend> backend;  // ref: exact fp32, no threads to set up
  std::unique_ptr<nn::Model> model;
};

// Reads `path`; an InputError names the file and the missing or malformed attribute, and says
// how to make a model file (train with this ringtrain; a checkpoint of format_version 1 lacks
// the geometry, normalisation and class names).
ModelFile read_model_file(const std::string& path);

// A host copy of a parameter's or buffer's values, looked up by its full name.
std::vector<float> tensor_values(const ModelFile& file, const std::string& name,
                                 std::vector<int64_t>* shape = nullptr);

}  // namespace ringtrain::tools
