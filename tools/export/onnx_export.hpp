// onnx_export.hpp — a model file's network as ONNX (opset 13), built with ONNX's own C++
// library and checked by its checker before a byte is written.
#pragma once

#include <string>

#include "ringtrain/nn/model_file.hpp"

namespace ringtrain::tools {

// Writes the inference network of `net` (built from `file`) to `onnx_path` (atomically: a temp file
// renamed into place). Input "input" float [batch, C, H, W], normalised as the metadata says;
// outputs "logits" and "probabilities" (softmax) [batch, classes], and for inspect heads
// "defect_probabilities", "pass_probability", "zone_pass_probabilities" (sigmoids).
// Metadata: model, heads, input_shape, mean, std, normalization, class_names (and the inspect
// names, pass_threshold and the verdict rule), source file and step. Returns the node count.
int write_onnx(const nn::ModelFile& file, nn::Model& net, const std::string& onnx_path);

}  // namespace ringtrain::tools
