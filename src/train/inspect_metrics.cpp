// inspect_metrics.cpp — F1, AUROC, pass/fail rates and the false-accept threshold.
#include "ringtrain/train/inspect_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

float sigmoid_probability(float logit) {
  return float(1.0 / (1.0 + std::exp(-double(logit))));
}

double f1_score(const std::vector<float>& prob, const std::vector<uint8_t>& truth,
                float threshold) {
  RT_CHECK(prob.size() == truth.size(), "f1: ", prob.size(), " scores for ", truth.size(),
           " labels");
  double tp = 0, fp = 0, fn = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const bool predicted = prob[i] >= threshold, positive = truth[i] != 0;
    tp += predicted && positive;
    fp += predicted && !positive;
    fn += !predicted && positive;
  }
  return tp > 0 ? 2 * tp / (2 * tp + fp + fn) : 0.0;
}

// Mann-Whitney: the mean rank of the positives against the negatives, tied scores sharing
// their mean rank.
double auroc(const std::vector<float>& score, const std::vector<uint8_t>& truth) {
  RT_CHECK(score.size() == truth.size(), "auroc: ", score.size(), " scores for ", truth.size(),
           " labels");
  std::vector<size_t> order(score.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  double positive_rank_sum = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && score[order[j]] == score[order[i]]) ++j;
    const double mean_rank = 0.5 * double(i + 1 + j);  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k)
      if (truth[order[k]]) positive_rank_sum += mean_rank, positives += 1;
    i = j;
  }
  const double negatives = double(score.size()) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

PassFigures pass_figures(const std::vector<float>& pass_prob,
                         const std::vector<uint8_t>& pass_truth, float threshold) {
  RT_CHECK(pass_prob.size() == pass_truth.size(), "pass figures: ", pass_prob.size(),
           " scores for ", pass_truth.size(), " labels");
  PassFigures f;
  int64_t right = 0, accepted_failing = 0, rejected_passing = 0;
  for (size_t i = 0; i < pass_prob.size(); ++i) {
    const bool called_pass = pass_prob[i] >= threshold, passes = pass_truth[i] != 0;
    right += called_pass == passes;
    (passes ? f.passing : f.failing) += 1;
    accepted_failing += called_pass && !passes;
    rejected_passing += !called_pass && passes;
  }
  const double n = double(pass_prob.size());
  f.accuracy = n > 0 ? double(right) / n : 0.0;
  f.false_accept = f.failing ? double(accepted_failing) / double(f.failing) : 0.0;
  f.false_reject = f.passing ? double(rejected_passing) / double(f.passing) : 0.0;
  return f;
}

float choose_pass_threshold(const std::vector<float>& pass_prob,
                            const std::vector<uint8_t>& pass_truth, double target) {
  std::vector<float> failing;
  for (size_t i = 0; i < pass_prob.size(); ++i)
    if (!pass_truth[i]) failing.push_back(pass_prob[i]);
  if (failing.empty()) return 0.5f;
  std::sort(failing.begin(), failing.end(), std::greater<float>());
  const size_t allowed = size_t(std::floor(target * double(failing.size()) + 1e-9));
  if (allowed >= failing.size()) return 0.0f;
  // Just above the highest failing score that must be rejected: the `allowed` above it (and
  // no tie of it) are accepted.
  const float above = std::nextafter(failing[allowed], 2.0f);
  return std::min(above, 1.0f);
}

namespace {

// Column c of an n x columns row-major matrix.
template <typename T>
std::vector<T> column(const std::vector<T>& rows, size_t columns, size_t c) {
  std::vector<T> out;
  out.reserve(rows.size() / std::max<size_t>(columns, 1));
  for (size_t i = c; i < rows.size(); i += columns) out.push_back(rows[i]);
  return out;
}

}  // namespace

InspectReport inspect_report(const InspectOutputs& out, const std::vector<std::string>& names,
                             float threshold) {
  InspectReport r;
  r.defect_names = names;
  r.threshold = threshold;
  const size_t d = size_t(out.defects);
  for (size_t c = 0; c < d; ++c) {
    const auto prob = column(out.defect_prob, d, c);
    const auto truth = column(out.defect_truth, d, c);
    r.defect_f1.push_back(f1_score(prob, truth));
    r.defect_auroc.push_back(auroc(prob, truth));
  }
  for (size_t z = 0; z < 4; ++z) {
    const auto prob = column(out.zone_prob, 4, z);
    const auto truth = column(out.zone_truth, 4, z);
    r.zone_accuracy.push_back(pass_figures(prob, truth, 0.5f).accuracy);
  }
  r.pass = pass_figures(out.pass_prob, out.pass_truth, threshold);
  r.pass_auroc = auroc(out.pass_prob, out.pass_truth);
  return r;
}

std::string inspect_line(const std::string& split, const InspectReport& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s inspect: pass/fail acc %.4f, false-accept %.4f (%lld failing), false-reject "
                "%.4f (%lld passing) at P(pass) >= %.6g; pass AUROC %.4f |",
                split.c_str(), r.pass.accuracy, r.pass.false_accept, (long long)r.pass.failing,
                r.pass.false_reject, (long long)r.pass.passing, double(r.threshold), r.pass_auroc);
  std::string line = buf;
  for (size_t c = 0; c < r.defect_names.size(); ++c) {
    std::snprintf(buf, sizeof buf, " %s F1 %.3f AUROC %.4f%s", r.defect_names[c].c_str(),
                  r.defect_f1[c], r.defect_auroc[c], c + 1 < r.defect_names.size() ? "," : " |");
    line += buf;
  }
  line += " zones acc";
  const char* zone = "ABCD";
  for (size_t z = 0; z < r.zone_accuracy.size(); ++z) {
    std::snprintf(buf, sizeof buf, " %c %.4f", zone[z], r.zone_accuracy[z]);
    line += buf;
  }
  return line;
}

}  // namespace ringtrain::train
