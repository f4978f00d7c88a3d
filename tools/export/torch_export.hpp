// torch_export.hpp — a model file's weights as a PyTorch state_dict file (torch.save's zip
// format), which the torchvision-style models of tools/bench_compute_torch.py load with
// strict=True: the same keys (ringtrain's parameter names), BN's running statistics and
// num_batches_tracked.
#pragma once

#include <string>

#include "ringtrain/nn/model_file.hpp"

namespace ringtrain::tools {

// Writes the state_dict of `net` (built from `file`) to `pt_path` atomically; returns the number of
// entries.
int write_torch_state_dict(const nn::ModelFile& file, nn::Model& net, const std::string& pt_path);

}  // namespace ringtrain::tools
