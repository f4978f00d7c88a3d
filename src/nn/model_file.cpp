// model_file.cpp — ModelFile: the card read once, then the model it describes with its weights.
#include "ringtrain/nn/model_file.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {
namespace {

h5::File open_model_file(const std::string& path) {
  RT_REQUIRE_INPUT(h5::is_hdf5(path), path, ": not an HDF5 file (a model file is a checkpoint)");
  return h5::File::open_read(path);
}

}  // namespace

ModelWeights parse_model_weights(const std::string& text, const std::string& option) {
  if (text == "averaged") return ModelWeights::kAveraged;
  if (text == "raw") return ModelWeights::kRaw;
  throw InputError(str(option, " ", text,
                       ": expected averaged (the run's moving average where it "
                       "kept one) or raw"));
}

ModelFile::ModelFile(const std::string& path)
    : path_(path), file_(open_model_file(path)), card_(io::read_model_card(file_.root())) {
  if (file_.root().has_attr("global_step"))
    global_step_ = file_.root().attr<int64_t>("global_step");
  has_average_ = file_.root().exists("ema");
}

std::unique_ptr<Model> ModelFile::build_model(Backend& be, ModelWeights weights) const {
  const HeadsSpec heads{parse_heads(card_.heads), int(card_.defect_names.size())};
  const ModelInput in{card_.input_shape[0], card_.input_shape[1], card_.input_shape[2]};
  std::unique_ptr<Model> model =
      make_model(card_.model, in, int(card_.class_names.size()), be, 0, heads);
  model->load(file_.root().open_group(averaged(weights) ? "ema" : "params"));
  return model;
}

std::vector<float> tensor_values(Model& model, const std::string& name,
                                 std::vector<int64_t>* shape) {
  const backend::Tensor* tensor = nullptr;
  for (const Parameter* p : model.parameters())
    if (p->name == name) tensor = &p->value;
  for (const NamedBuffer& b : model.buffers())
    if (b.name == name) tensor = b.tensor;
  RT_CHECK(tensor != nullptr, "the model has no tensor ", name);
  std::vector<float> values(size_t(tensor->numel()));
  model.backend().download(*tensor, values.data());
  if (shape) shape->assign(tensor->shape().begin(), tensor->shape().end());
  return values;
}

}  // namespace ringtrain::nn
