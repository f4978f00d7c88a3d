// inference_plan.hpp — a trained model's inference pass compiled for speed: what `ringtrain
// predict` runs.
//
// Model::forward(x, false) runs the layers as training built them: every batch norm a pass over
// its activations, every residual addition another, weights reordered each call. A plan traces
// the model once (Model::trace) and builds its own ops from the trace:
// - a batch norm whose input is a convolution's output read by nothing else is folded into that
//   convolution (w' = w * gamma / sqrt(var + eps) per output channel, bias' = (bias - mean) *
//   gamma / sqrt(var + eps) + beta, computed in double on the host);
// - a ReLU reading such an output alone becomes the convolution's post-op;
// - a residual addition (then its ReLU) becomes the convolution's sum post-op where the backend
//   fuses it (Backend::fuses_conv_residual), accumulating into the residual's own memory when
//   nothing reads the residual afterwards;
// - every other node runs as the layer's op does.
// The convolutions are built for inference (ConvSpec::inference), so their weights are prepared
// once. Results equal Model::forward(x, false) up to the rounding of the folded weights.
#pragma once

#include <memory>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {

// What the compilation fused, for the log and for tests.
struct InferencePlanStats {
  int steps = 0;               // ops run per pass
  int folded_batch_norms = 0;  // batch norms folded into a convolution
  int fused_relus = 0;         // ReLUs run as a convolution's or an addition's post-op
  int fused_residuals = 0;     // residual additions run as a convolution's sum post-op
};

class InferencePlan {
 public:
  // Reads the model's weights and BN running statistics now: a plan is for weights that no
  // longer change (build another after training further). The model must outlive the plan.
  explicit InferencePlan(Model& model);
  ~InferencePlan();
  InferencePlan(const InferencePlan&) = delete;
  InferencePlan& operator=(const InferencePlan&) = delete;

  // One pass over input [N, C, H, W] (plain, on the model's backend). The outputs are valid
  // until the next run.
  void run(const Tensor& input);
  // The class logits [N, classes] of the last run.
  const Tensor& logits() const;
  // With inspection heads: that head's logits of the last run (an Error without them).
  const Tensor& head(Head which) const;

  const InferencePlanStats& stats() const { return stats_; }

 private:
  struct Step;
  struct Builder;  // inference_plan.cpp: the trace grouped into steps
  void run_step(Step& step);

  Backend& be_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<Tensor> values_;  // slot 0 is the input
  int logits_ = -1;
  int heads_[kExtraHeads] = {-1, -1, -1};
  InferencePlanStats stats_;
};

}  // namespace ringtrain::nn
