// model_file.cpp — reading a model file for export, through the loader predict uses.
#include "model_file.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model_file.hpp"

namespace ringtrain::tools {

ModelFile read_model_file(const std::string& path, nn::ModelWeights weights) {
  ModelFile f;
  f.path = path;
  f.backend = backend::make_backend("ref", 1);
  nn::LoadedModel loaded = nn::load_model_file(
      path, *f.backend,
      "a model file is the checkpoint a training run of this ringtrain writes; resume its run "
      "(ringtrain --deck DECK --resume) to rewrite it as one",
      weights);
  f.card = std::move(loaded.card);
  f.model = std::move(loaded.model);
  f.global_step = loaded.global_step;
  f.averaged = loaded.averaged;
  return f;
}

std::vector<float> tensor_values(const ModelFile& file, const std::string& name,
                                 std::vector<int64_t>* shape) {
  const backend::Tensor* tensor = nullptr;
  for (const nn::Parameter* p : file.model->parameters())
    if (p->name == name) tensor = &p->value;
  for (const nn::NamedBuffer& b : file.model->buffers())
    if (b.name == name) tensor = b.tensor;
  RT_CHECK(tensor != nullptr, file.path, ": the model has no tensor ", name);
  std::vector<float> values(size_t(tensor->numel()));
  file.backend->download(*tensor, values.data());
  if (shape) shape->assign(tensor->shape().begin(), tensor->shape().end());
  return values;
}

}  // namespace ringtrain::tools
