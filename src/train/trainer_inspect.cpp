// trainer_inspect.cpp — the Trainer's inspection heads: targets and weights of a batch, the
// outputs gathered to rank 0, their figures, the pass threshold chosen on val, the model card.
#include "trainer_run.hpp"

namespace ringtrain::train {

// The heads' 0/1 targets, smoothed to t (1 - s) + s / 2 in training (train.label_smoothing).
nn::InspectTargets Trainer::inspect_targets(const data::Batch& batch, float smoothing) {
  const size_t defects = batch.multi_hot.size();
  targets_.resize(defects + batch.pass.size() + batch.zone_pass.size());
  std::copy(batch.multi_hot.begin(), batch.multi_hot.end(), targets_.begin());
  std::copy(batch.pass.begin(), batch.pass.end(), targets_.begin() + std::ptrdiff_t(defects));
  std::copy(batch.zone_pass.begin(), batch.zone_pass.end(),
            targets_.begin() + std::ptrdiff_t(defects + batch.pass.size()));
  if (smoothing > 0)
    for (float& t : targets_) t = t * (1.0f - smoothing) + 0.5f * smoothing;
  const float* t = targets_.data();
  return {t, t + defects, t + defects + batch.pass.size()};
}

nn::InspectWeights Trainer::inspect_weights() const {
  const ModelConfig& m = cfg_.model;
  return {float(m.loss_weight_defects), float(m.loss_weight_pass), float(m.loss_weight_zones)};
}

// Appends the last forward's head probabilities and the batch's labels to eval_outputs_.
void Trainer::collect_inspect_outputs(const data::Batch& batch) {
  InspectOutputs& out = eval_outputs_;
  const std::pair<nn::Head, std::vector<float>*> heads[] = {{nn::Head::kDefects, &out.defect_prob},
                                                            {nn::Head::kPass, &out.pass_prob},
                                                            {nn::Head::kZones, &out.zone_prob}};
  for (const auto& [head, probs] : heads) {
    const backend::Tensor& logits = model_->inspect()->output(head);
    const size_t at = probs->size();
    probs->resize(at + size_t(logits.numel()));
    backend_->download(logits, probs->data() + at);
    for (size_t i = at; i < probs->size(); ++i) (*probs)[i] = sigmoid_probability((*probs)[i]);
  }
  append_inspect_truths(batch);
}

// The batch's head labels after its probabilities in eval_outputs_ (either path above them).
void Trainer::append_inspect_truths(const data::Batch& batch) {
  InspectOutputs& out = eval_outputs_;
  out.defects = model_->inspect()->defects();
  out.defect_truth.insert(out.defect_truth.end(), batch.multi_hot.begin(), batch.multi_hot.end());
  out.pass_truth.insert(out.pass_truth.end(), batch.pass.begin(), batch.pass.end());
  out.zone_truth.insert(out.zone_truth.end(), batch.zone_pass.begin(), batch.zone_pass.end());
}

// Collective: every rank's eval_outputs_ on rank 0 (the others get an empty set).
InspectOutputs Trainer::gather_inspect_outputs() {
  InspectOutputs all;
  all.defects = eval_outputs_.defects;
  all.defect_prob = gather_rows_to_root(comm_, eval_outputs_.defect_prob);
  all.defect_truth = gather_rows_to_root(comm_, eval_outputs_.defect_truth);
  all.pass_prob = gather_rows_to_root(comm_, eval_outputs_.pass_prob);
  all.pass_truth = gather_rows_to_root(comm_, eval_outputs_.pass_truth);
  all.zone_prob = gather_rows_to_root(comm_, eval_outputs_.zone_prob);
  all.zone_truth = gather_rows_to_root(comm_, eval_outputs_.zone_truth);
  return all;
}

// Rank 0: one log line of the split's figures at threshold, kept for the results file.
void Trainer::report_inspect(const std::string& split, const InspectOutputs& all, float threshold) {
  if (comm_.rank() != 0 || all.images() == 0) return;
  const InspectReport r = inspect_report(all, card_.defect_names, threshold);
  log::info(inspect_line(split, r));
  io::InspectFigures f;
  f.split = split;
  f.images = int64_t(all.images());
  f.defect_names = r.defect_names;
  f.defect_f1 = r.defect_f1;
  f.defect_auroc = r.defect_auroc;
  f.zone_accuracy = r.zone_accuracy;
  f.pass_accuracy = r.pass.accuracy;
  f.false_accept = r.pass.false_accept;
  f.false_reject = r.pass.false_reject;
  f.failing = r.pass.failing;
  f.passing = r.pass.passing;
  f.pass_auroc = r.pass_auroc;
  f.threshold = threshold;
  f.false_accept_target = cfg_.model.false_accept_target;
  inspect_figures_.erase(
      std::remove_if(inspect_figures_.begin(), inspect_figures_.end(),
                     [&](const io::InspectFigures& g) { return g.split == split; }),
      inspect_figures_.end());
  inspect_figures_.push_back(std::move(f));
}

// Rank 0, at the end of training: the pass threshold for model.false_accept_target on the last
// evaluation of eval_split, into the model card the final checkpoint carries.
void Trainer::choose_pass_threshold() {
  if (comm_.rank() != 0 || val_outputs_.images() == 0) return;
  card_.pass_threshold = train::choose_pass_threshold(
      val_outputs_.pass_prob, val_outputs_.pass_truth, cfg_.model.false_accept_target);
  log::info(str("pass threshold: P(pass) >= ", card_.pass_threshold, " on ", cfg_.data.eval_split,
                " for false-accept <= ", cfg_.model.false_accept_target));
  report_inspect(cfg_.data.eval_split, val_outputs_, card_.pass_threshold);
}

io::ModelCard Trainer::model_card() const {
  const data::DatasetInfo& info = train_loader_->info();
  io::ModelCard card;
  card.model = model_->name();
  card.heads = nn::heads_name(model_->heads());
  card.input_shape = {info.channels, info.height, info.width};
  card.mean = info.mean;
  card.std = info.std;
  card.class_names = info.class_names;
  if (inspect_) {
    card.defect_names = train_loader_->defect_names();
    card.zone_names = {"A", "B", "C", "D"};
    card.false_accept_target = float(cfg_.model.false_accept_target);
  }
  return card;
}

}  // namespace ringtrain::train
