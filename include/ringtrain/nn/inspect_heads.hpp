// inspect_heads.hpp — the fiber inspection heads: the primary-class classifier plus a
// multi-label defect head, a pass/fail head and the four zone heads on one feature vector.
//
// model.heads = inspect splits a zoo model before its final Linear (the classifier): the
// backbone's feature vector [N, F] feeds the classifier and three more Linear layers,
// head_defects [D, F], head_pass [1, F] and head_zones [4, F], whose outputs are logits
// (sigmoid gives probabilities; P(pass) = sigmoid(pass logit)). Their losses are binary
// cross-entropies weighted by the deck; the feature gradient is the sum of the four heads'.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

// What a model predicts: the primary class alone, or the inspection heads too.
enum class Heads { kClass, kInspect };
// "class" or "inspect"; anything else is an InputError naming the value.
Heads parse_heads(const std::string& text);
const char* heads_name(Heads heads);

struct HeadsSpec {
  Heads kind = Heads::kClass;
  int defects = 0;  // D: the defect head's outputs (the shards' multi_hot columns)
};

constexpr int kZones = 4;  // IEC 61300-3-35 zones A..D

// The extra heads, in the order of their parameters.
enum class Head { kDefects = 0, kPass = 1, kZones = 2 };
constexpr int kExtraHeads = 3;

// Host targets in [0, 1] of one batch of n images: defects n*D, pass n, zones n*4.
struct InspectTargets {
  const float* defects = nullptr;
  const float* pass = nullptr;
  const float* zones = nullptr;
};

// Loss weights of the extra heads (model.loss_weight_*).
struct InspectWeights {
  float defects = 1, pass = 1, zones = 1;
};

// Each extra head's mean BCE (unweighted).
struct InspectLosses {
  double defects = 0, pass = 0, zones = 0;
  double weighted(const InspectWeights& w) const {
    return w.defects * defects + w.pass * pass + w.zones * zones;
  }
};

class InspectHeads {
 public:
  // classifier: the model's final Linear, taken out of its Sequential.
  InspectHeads(Backend& be, std::unique_ptr<Layer> classifier, int64_t features, int defects);

  // features: the backbone's output. Returns the class logits; output() the others.
  const Tensor& forward(const Tensor& features, bool training);
  const Tensor& output(Head head) const { return *outputs_[int(head)]; }
  int defects() const { return defects_; }
  // Sets the extra heads' logit gradients (weight x loss scale x d BCE / d logit).
  InspectLosses loss(const InspectTargets& targets, const InspectWeights& weights,
                     float grad_scale);
  // The classifier's backward of dlogits and the extra heads' of their loss(), in that order;
  // returns the gradient of the features (the four heads' sum).
  const Tensor& backward(const Tensor& dlogits, const GradReady& ready);
  double forward_flops() const;
  // The classifier and the three heads on value `features` (graph.hpp).
  TracedOutputs trace(Graph& graph, const std::string& features) const;
  void collect(std::vector<Parameter*>& params, std::vector<NamedBuffer>& buffers);
  void collect_backward_order(std::vector<Parameter*>& order);

 private:
  Backend& be_;
  int defects_;
  std::unique_ptr<Layer> classifier_;
  Linear head_defects_, head_pass_, head_zones_;
  Linear* heads_[kExtraHeads];
  const Tensor* outputs_[kExtraHeads] = {};
  Tensor dheads_[kExtraHeads];
  std::unique_ptr<backend::AddOp> add_;
  Tensor sums_[kExtraHeads];  // running sums of the feature gradients
  bool have_loss_ = false;
};

}  // namespace ringtrain::nn
