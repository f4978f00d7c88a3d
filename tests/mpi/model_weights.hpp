// model_weights.hpp — every parameter of a model copied to the host, one after another: what the
// MPI tests compare bitwise across ranks after each step.
#pragma once

#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/nn/model.hpp"

namespace rt_test {

inline std::vector<float> model_weights(const ringtrain::nn::Model& model,
                                        ringtrain::backend::Backend& be) {
  std::vector<float> all;
  for (const auto* p : model.parameters()) {
    std::vector<float> host(size_t(p->numel()));
    be.download(p->value, host.data());
    all.insert(all.end(), host.begin(), host.end());
  }
  return all;
}

}  // namespace rt_test
