// init.cpp — PyTorch's default initialisation, from a seed and each parameter's name.
#include <cmath>
#include <vector>

#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {
namespace {

// splitmix64 (core/random.hpp): a small generator whose output is the same on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() { return splitmix64(state); }
  // Uniform in [-bound, bound).
  float uniform(double bound) { return float((double(next() >> 11) * 0x1.0p-53 * 2 - 1) * bound); }
};

}  // namespace

void init_parameters(Model& model, uint64_t seed) {
  Backend& be = model.backend();
  for (Parameter* p : model.parameters()) {
    switch (p->role) {
      case ParamRole::kNormScale:
        be.fill(p->value, 1.0f);
        continue;
      case ParamRole::kNormShift:
        be.fill(p->value, 0.0f);
        continue;
      default:
        break;
    }
    // kaiming_uniform(a=sqrt(5)) gives bound sqrt(6/((1+5)*fan_in)) = 1/sqrt(fan_in), the
    // same bound PyTorch uses for biases.
    double bound = 1.0 / std::sqrt(double(p->fan_in));
    SplitMix64 rng{seed ^ fnv1a(p->name)};
    std::vector<float> host(size_t(p->numel()));
    for (float& v : host) v = rng.uniform(bound);
    be.upload(host.data(), p->value);
  }
}

}  // namespace ringtrain::nn
