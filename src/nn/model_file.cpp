// model_file.cpp — load_model_file: the card, then the model it describes, then its weights.
#include "ringtrain/nn/model_file.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::nn {

ModelWeights parse_model_weights(const std::string& text, const std::string& option) {
  if (text == "averaged") return ModelWeights::kAveraged;
  if (text == "raw") return ModelWeights::kRaw;
  throw InputError(str(option, " ", text, ": expected averaged (the run's moving average where it "
                       "kept one) or raw"));
}

LoadedModel load_model_file(const std::string& path, Backend& be, const std::string& resave_hint,
                            ModelWeights weights) {
  RT_REQUIRE_INPUT(h5::is_hdf5(path), path, ": not an HDF5 file (a model file is a checkpoint)");
  const h5::File file = h5::File::open_read(path);
  LoadedModel loaded;
  loaded.card = io::read_model_card(file.root(), resave_hint);
  const io::ModelCard& card = loaded.card;
  const HeadsSpec heads{parse_heads(card.heads), int(card.defect_names.size())};
  const ModelInput in{card.input_shape[0], card.input_shape[1], card.input_shape[2]};
  loaded.model = make_model(card.model, in, int(card.class_names.size()), be, 0, heads);
  loaded.averaged = weights == ModelWeights::kAveraged && file.root().exists("ema");
  loaded.model->load(file.root().open_group(loaded.averaged ? "ema" : "params"));
  if (file.root().has_attr("global_step"))
    loaded.global_step = file.root().attr<int64_t>("global_step");
  return loaded;
}

}  // namespace ringtrain::nn
