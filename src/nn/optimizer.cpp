// optimizer.cpp — SGD with momentum through the backend's sgd_update, and its checkpoint.
#include "ringtrain/nn/optimizer.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

Sgd::Sgd(std::vector<Parameter*> params, const SgdOptions& options, backend::Backend& be)
    : params_(std::move(params)), options_(options), be_(be) {
  RT_REQUIRE_INPUT(options.momentum >= 0 && options.momentum < 1,
                   "optimizer.momentum must be in [0, 1), got ", options.momentum);
  RT_REQUIRE_INPUT(options.weight_decay >= 0, "optimizer.weight_decay must be >= 0, got ",
                   options.weight_decay);
  RT_REQUIRE_INPUT(!options.nesterov || options.momentum > 0,
                   "optimizer.nesterov needs momentum > 0");
  for (Parameter* p : params_) {
    momentum_.push_back(be.alloc(p->shape));
    be.fill(momentum_.back(), 0.0f);
  }
}

void Sgd::step(double lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    bool decay = options_.decay_bn_and_bias || !p.no_weight_decay;
    backend::SgdSpec spec{float(lr), float(options_.momentum),
                          decay ? float(options_.weight_decay) : 0.0f, options_.nesterov};
    be_.sgd_update(p.value, p.grad, momentum_[i], spec);
  }
  ++steps_;
}

void Sgd::save(h5::Group& group) const {
  group.set_attr("steps", int64_t(steps_));
  std::vector<float> host;
  for (size_t i = 0; i < params_.size(); ++i) {
    host.resize(size_t(params_[i]->numel()));
    be_.download(momentum_[i], host.data());
    const Shape& s = params_[i]->shape;
    group.write<float>(params_[i]->name, h5::Dims(s.begin(), s.end()), host.data());
  }
}

void Sgd::load(const h5::Group& group) {
  steps_ = group.attr<int64_t>("steps");
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = params_[i]->name;
    RT_REQUIRE_INPUT(group.exists(name), "file ", group.file_name(), ": ", group.path(),
                     " has no momentum for parameter ", name);
    h5::Dataset ds = group.open_dataset(name);
    h5::Dims dims = ds.dims();
    Shape shape(dims.begin(), dims.end());
    RT_REQUIRE_INPUT(shape == params_[i]->shape, "file ", group.file_name(), ": momentum of ", name,
                     " has shape ", shape_str(shape), " but the parameter is ",
                     shape_str(params_[i]->shape));
    std::vector<float> host = ds.read_all<float>();
    be_.upload(host.data(), momentum_[i]);
  }
}

}  // namespace ringtrain::nn
