// model_file.cpp — reading a model file (a checkpoint of format_version 2) for export.
#include "model_file.hpp"

#include <unistd.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/io/h5.hpp"

namespace ringtrain::tools {
namespace {

const char* const kHowToMake =
    "a model file is the checkpoint a training run of this ringtrain writes "
    "(output.checkpoint_dir), format_version 2 or later";

void require_attr(const h5::Group& root, const std::string& path, const std::string& name) {
  if (!root.has_attr(name))
    throw InputError(str(path, ": no attribute '", name, "' (", kHowToMake, ")"));
}

void read_geometry(const h5::Group& root, ModelFile& f) {
  const std::vector<int32_t> shape = root.attr_vector<int32_t>("input_shape");
  RT_REQUIRE_INPUT(shape.size() == 3 && shape[0] > 0 && shape[1] > 0 && shape[2] > 0, f.path,
                   ": attribute input_shape must hold C, H, W > 0");
  f.channels = shape[0];
  f.height = shape[1];
  f.width = shape[2];
  f.mean = root.attr_vector<float>("mean");
  f.std = root.attr_vector<float>("std");
  RT_REQUIRE_INPUT(f.mean.size() == size_t(f.channels) && f.std.size() == size_t(f.channels),
                   f.path, ": attributes mean and std must hold ", f.channels,
                   " values (one a channel)");
  for (float s : f.std) RT_REQUIRE_INPUT(s > 0, f.path, ": attribute std holds ", s, " <= 0");
}

}  // namespace

ModelFile read_model_file(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0) throw InputError(str(path, ": cannot read the model file"));
  if (!h5::is_hdf5(path)) throw InputError(str(path, ": not an HDF5 file (", kHowToMake, ")"));
  h5::File file = h5::File::open_read(path);
  const h5::Group& root = file.root();
  if (!root.has_attr("format") || root.attr_string("format") != "ringtrain-checkpoint")
    throw InputError(str(path, ": not a ringtrain checkpoint (", kHowToMake, ")"));
  ModelFile f;
  f.path = path;
  for (const char* name : {"model", "input_shape", "mean", "std", "class_names"})
    require_attr(root, path, name);
  f.model_name = root.attr_string("model");
  f.heads = root.has_attr("heads") ? root.attr_string("heads") : "class";
  read_geometry(root, f);
  f.class_names = root.attr_strings("class_names");
  RT_REQUIRE_INPUT(!f.class_names.empty(), path, ": attribute class_names is empty");
  if (f.heads == "inspect") {
    for (const char* name : {"defect_names", "zone_names"}) require_attr(root, path, name);
    f.defect_names = root.attr_strings("defect_names");
    f.zone_names = root.attr_strings("zone_names");
    if (root.has_attr("pass_threshold")) f.pass_threshold = root.attr<float>("pass_threshold");
  }
  if (root.has_attr("global_step")) f.global_step = root.attr<int64_t>("global_step");
  f.backend = backend::make_backend("ref", 1);
  f.model = nn::make_model(f.model_name, {f.channels, f.height, f.width}, int(f.class_names.size()),
                           *f.backend, 0);
  f.model->load(root.open_group("params"));
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
