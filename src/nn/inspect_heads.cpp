// inspect_heads.cpp — the classifier and the defect, pass and zone heads on one feature vector.
#include "ringtrain/nn/inspect_heads.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

Heads parse_heads(const std::string& text) {
  if (text == "class") return Heads::kClass;
  if (text == "inspect") return Heads::kInspect;
  throw InputError(str("bad value '", text, "' for model.heads (one of: class, inspect)"));
}

const char* heads_name(Heads heads) {
  return heads == Heads::kInspect ? "inspect" : "class";
}

InspectHeads::InspectHeads(Backend& be, std::unique_ptr<Layer> classifier, int64_t features,
                           int defects)
    : be_(be),
      defects_(defects),
      classifier_(std::move(classifier)),
      head_defects_("head_defects", be, features, defects),
      head_pass_("head_pass", be, features, 1),
      head_zones_("head_zones", be, features, kZones),
      heads_{&head_defects_, &head_pass_, &head_zones_},
      add_(be.make_add(false)) {
  RT_REQUIRE_INPUT(defects >= 1,
                   "model.heads = inspect needs defect labels (multi_hot) in the data");
  RT_CHECK(dynamic_cast<Linear*>(classifier_.get()) != nullptr, "inspect heads: layer ",
           classifier_->name(), " is not the model's final Linear");
}

const Tensor& InspectHeads::forward(const Tensor& features, bool training) {
  const Tensor& logits = classifier_->forward(features, training);
  for (int h = 0; h < kExtraHeads; ++h) outputs_[h] = &heads_[h]->forward(features, training);
  have_loss_ = false;
  return logits;
}

InspectLosses InspectHeads::loss(const InspectTargets& t, const InspectWeights& w,
                                 float grad_scale) {
  RT_CHECK(outputs_[0] != nullptr, "inspect heads: loss() before forward()");
  InspectLosses l;
  l.defects =
      be_.sigmoid_binary_cross_entropy(*outputs_[0], t.defects, w.defects * grad_scale, dheads_[0]);
  l.pass = be_.sigmoid_binary_cross_entropy(*outputs_[1], t.pass, w.pass * grad_scale, dheads_[1]);
  l.zones =
      be_.sigmoid_binary_cross_entropy(*outputs_[2], t.zones, w.zones * grad_scale, dheads_[2]);
  have_loss_ = true;
  return l;
}

const Tensor& InspectHeads::backward(const Tensor& dlogits, const GradReady& ready) {
  RT_CHECK(have_loss_, "inspect heads: backward() before loss()");
  const Tensor* sum = &classifier_->backward(dlogits, ready);
  for (int h = 0; h < kExtraHeads; ++h) {
    add_->forward(*sum, heads_[h]->backward(dheads_[h], ready), sums_[h]);
    sum = &sums_[h];
  }
  return *sum;
}

double InspectHeads::forward_flops() const {
  double flops = classifier_->forward_flops({});
  for (const Linear* head : heads_) flops += head->forward_flops({});
  return flops;
}

void InspectHeads::collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers) {
  classifier_->collect(params, buffers);
  for (Linear* head : heads_) head->collect(params, buffers);
}

void InspectHeads::collect_backward_order(std::vector<Parameter*>& order) {
  classifier_->collect_backward_order(order);
  for (Linear* head : heads_) head->collect_backward_order(order);
}

}  // namespace ringtrain::nn
