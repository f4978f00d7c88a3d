// optimizer.cpp — SGD, LARS, LAMB and AdamW through the backend's update ops, and their
// checkpoint.
#include "ringtrain/nn/optimizer.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {
namespace {

void upload_dataset(const h5::Group& group, const std::string& name, const Parameter& p,
                    const char* what, backend::Backend& be, Tensor& dst) {
  RT_REQUIRE_INPUT(group.exists(name), "file ", group.file_name(), ": ", group.path(), " has no ",
                   what, " for parameter ", p.name);
  h5::Dataset ds = group.open_dataset(name);
  h5::Dims dims = ds.dims();
  Shape shape(dims.begin(), dims.end());
  RT_REQUIRE_INPUT(shape == p.shape, "file ", group.file_name(), ": ", what, " of ", p.name,
                   " has shape ", shape_str(shape), " but the parameter is ", shape_str(p.shape));
  std::vector<float> host = ds.read_all<float>();
  be.upload(host.data(), dst);
}

void write_dataset(h5::Group& group, const Parameter& p, const Tensor& t, backend::Backend& be) {
  std::vector<float> host(size_t(p.numel()));
  be.download(t, host.data());
  group.write<float>(p.name, h5::Dims(p.shape.begin(), p.shape.end()), host.data());
}

}  // namespace

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "lars") return OptimizerKind::kLars;
  if (name == "lamb") return OptimizerKind::kLamb;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw InputError(str("train.optimizer = ", name, ": expected sgd, lars, lamb or adamw"));
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kLars: return "lars";
    case OptimizerKind::kLamb: return "lamb";
    case OptimizerKind::kAdamW: break;
  }
  return "adamw";
}

Optimizer::Optimizer(std::vector<Parameter*> params, const OptimizerOptions& options,
                     backend::Backend& be)
    : params_(std::move(params)), options_(options), be_(be) {
  RT_REQUIRE_INPUT(options.momentum >= 0 && options.momentum < 1,
                   "optimizer.momentum must be in [0, 1), got ", options.momentum);
  RT_REQUIRE_INPUT(options.weight_decay >= 0, "optimizer.weight_decay must be >= 0, got ",
                   options.weight_decay);
  RT_REQUIRE_INPUT(!options.nesterov || options.momentum > 0,
                   "optimizer.nesterov needs momentum > 0");
  for (Parameter* p : params_) {
    first_.push_back(be.alloc(p->shape));
    be.fill(first_.back(), 0.0f);
    if (!uses_second_moment()) continue;
    second_.push_back(be.alloc(p->shape));
    be.fill(second_.back(), 0.0f);
  }
}

bool Optimizer::fully_decayed(const Parameter& p) const {
  return options_.decay_bn_and_bias || !p.no_weight_decay;
}

float Optimizer::decay_of(const Parameter& p) const {
  return fully_decayed(p) ? float(options_.weight_decay) : 0.0f;
}

bool Optimizer::uses_second_moment() const {
  return options_.kind == OptimizerKind::kLamb || options_.kind == OptimizerKind::kAdamW;
}

void Optimizer::step(double lr) {
  const OptimizerOptions& o = options_;
  if (o.kind == OptimizerKind::kSgd) {
    // Every tensor in one call: one launch on cuda.
    std::vector<backend::SgdTensors> tensors;
    tensors.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      tensors.push_back({&p.value, &p.grad, &first_[i], decay_of(p)});
    }
    be_.sgd_update_many(tensors, {float(lr), float(o.momentum), 0.0f, o.nesterov});
    ++steps_;
    for (Parameter* p : params_) p->grad_consumed = true;
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    backend::AdaptiveSpec spec;
    spec.rule = o.kind == OptimizerKind::kLars   ? backend::UpdateRule::kLars
                : o.kind == OptimizerKind::kLamb ? backend::UpdateRule::kLamb
                                                 : backend::UpdateRule::kAdamW;
    spec.lr = float(lr);
    spec.weight_decay = decay_of(p);
    spec.momentum = float(o.momentum);
    spec.beta1 = float(o.beta1), spec.beta2 = float(o.beta2), spec.eps = float(o.eps);
    spec.trust_coef = float(o.trust_coef);
    spec.layer_adaptation = fully_decayed(p);
    spec.step = steps_ + 1;
    be_.adaptive_update(p.value, p.grad, first_[i], uses_second_moment() ? &second_[i] : nullptr,
                        spec);
  }
  ++steps_;
  for (Parameter* p : params_) p->grad_consumed = true;
}

void Optimizer::save(h5::Group& group) const {
  group.set_attr("steps", int64_t(steps_));
  group.set_attr("rule", optimizer_name(options_.kind));
  for (size_t i = 0; i < params_.size(); ++i) write_dataset(group, *params_[i], first_[i], be_);
  if (!uses_second_moment()) return;
  h5::Group second = group.create_group("second_moment");
  for (size_t i = 0; i < params_.size(); ++i) write_dataset(second, *params_[i], second_[i], be_);
}

void Optimizer::load(const h5::Group& group) {
  // Checkpoints from before the other rules hold SGD's state and no rule.
  const std::string rule = group.has_attr("rule") ? group.attr_string("rule") : "sgd";
  RT_REQUIRE_INPUT(rule == optimizer_name(options_.kind), "file ", group.file_name(),
                   ": the checkpoint holds the state of train.optimizer = ", rule, ", not ",
                   optimizer_name(options_.kind), ": resume with the optimizer it was written by");
  steps_ = group.attr<int64_t>("steps");
  for (size_t i = 0; i < params_.size(); ++i)
    upload_dataset(group, params_[i]->name, *params_[i], "momentum", be_, first_[i]);
  if (!uses_second_moment()) return;
  const h5::Group second = group.open_group("second_moment");
  for (size_t i = 0; i < params_.size(); ++i)
    upload_dataset(second, params_[i]->name, *params_[i], "second moment", be_, second_[i]);
}

}  // namespace ringtrain::nn
