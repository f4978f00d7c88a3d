// model_file.cpp — the model file's card: root attributes of a version-2 checkpoint.
#include "ringtrain/io/model_file.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::io {

void write_model_card(h5::Group& root, const ModelCard& card) {
  root.set_attr("model", card.model);
  root.set_attr("heads", card.heads);
  root.set_attr("input_shape", card.input_shape);
  root.set_attr("mean", card.mean);
  root.set_attr("std", card.std);
  root.set_attr("class_names", card.class_names);
  if (!card.inspect()) return;
  root.set_attr("defect_names", card.defect_names);
  root.set_attr("zone_names", card.zone_names);
  root.set_attr("pass_threshold", card.pass_threshold);
  root.set_attr("false_accept_target", card.false_accept_target);
}

namespace {

// The attributes of the card root lacks, space-separated ("" when none).
std::string missing_attributes(const h5::Group& root) {
  std::vector<std::string> needed{"model", "heads", "input_shape", "mean", "std", "class_names"};
  if (root.has_attr("heads") && root.attr_string("heads") == "inspect")
    for (const char* name : {"defect_names", "zone_names", "pass_threshold", "false_accept_target"})
      needed.emplace_back(name);
  std::string missing;
  for (const std::string& name : needed)
    if (!root.has_attr(name)) missing += (missing.empty() ? "" : " ") + name;
  return missing;
}

}  // namespace

ModelCard read_model_card(const h5::Group& root) {
  const std::string& path = root.file_name();
  const bool checkpoint =
      root.has_attr("format") && root.attr_string("format") == kCheckpointFormat;
  RT_REQUIRE_INPUT(checkpoint, path, ": not a ringtrain model file (no format attribute '",
                   kCheckpointFormat, "')");
  const int32_t version = root.attr<int32_t>("format_version");
  const std::string missing = missing_attributes(root);
  RT_REQUIRE_INPUT(missing.empty(), path, ": checkpoint format_version ", version,
                   " lacks what inference needs (", missing, "); ", kResaveHint);
  ModelCard card;
  card.model = root.attr_string("model");
  card.heads = root.attr_string("heads");
  card.input_shape = root.attr_vector<int32_t>("input_shape");
  card.mean = root.attr_vector<float>("mean");
  card.std = root.attr_vector<float>("std");
  card.class_names = root.attr_strings("class_names");
  RT_REQUIRE_INPUT(card.heads == "class" || card.heads == "inspect", path, ": heads is '",
                   card.heads, "' (class or inspect)");
  RT_REQUIRE_INPUT(card.input_shape.size() == 3 && card.input_shape[0] > 0 &&
                       card.mean.size() == size_t(card.input_shape[0]) &&
                       card.std.size() == card.mean.size(),
                   path, ": input_shape, mean and std disagree (", card.input_shape.size(),
                   " dimensions, ", card.mean.size(), " means, ", card.std.size(), " stds)");
  if (card.inspect()) {
    card.defect_names = root.attr_strings("defect_names");
    card.zone_names = root.attr_strings("zone_names");
    card.pass_threshold = root.attr<float>("pass_threshold");
    card.false_accept_target = root.attr<float>("false_accept_target");
  }
  return card;
}

}  // namespace ringtrain::io
