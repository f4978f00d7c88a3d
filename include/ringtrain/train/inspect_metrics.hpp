// inspect_metrics.hpp — what the inspection heads are judged by: per-defect F1 and AUROC,
// pass/fail accuracy, false-accept and false-reject rates, and the pass threshold chosen
// for a false-accept target. Pure functions of per-image probabilities and labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::train {

// P = 1 / (1 + e^-z) in float: evaluation and prediction call this one function, so the
// threshold chosen on val means the same thing to rt-predict.
float sigmoid_probability(float logit);

// F1 of the positive class at p >= threshold (0 when nothing is positive or predicted).
double f1_score(const std::vector<float>& prob, const std::vector<uint8_t>& truth,
                float threshold = 0.5f);
// Area under the ROC curve (ties count half); NaN when truth holds one class only.
double auroc(const std::vector<float>& score, const std::vector<uint8_t>& truth);

// A verdict of pass when P(pass) >= threshold, against the true verdict (1 = pass).
struct PassFigures {
  double accuracy = 0;
  double false_accept = 0;  // truly failing images called passing / failing images
  double false_reject = 0;  // truly passing images called failing / passing images
  int64_t failing = 0, passing = 0;
};
PassFigures pass_figures(const std::vector<float>& pass_prob,
                         const std::vector<uint8_t>& pass_truth, float threshold);

// The lowest threshold whose false-accept rate on these images is at most target (so the
// fewest passing images are rejected): above all but floor(target x failing) of the failing
// images' P(pass). 0.5 when no image fails; at most 1 (then ties at 1 are still accepted).
float choose_pass_threshold(const std::vector<float>& pass_prob,
                            const std::vector<uint8_t>& pass_truth, double target);

// Every image's head probabilities and labels, in sample order (rank 0's gathered copy).
struct InspectOutputs {
  int defects = 0;
  std::vector<float> defect_prob;  // n * defects
  std::vector<uint8_t> defect_truth;
  std::vector<float> pass_prob;  // n
  std::vector<uint8_t> pass_truth;
  std::vector<float> zone_prob;  // n * 4
  std::vector<uint8_t> zone_truth;
  size_t images() const { return pass_prob.size(); }
};

struct InspectReport {
  std::vector<std::string> defect_names;
  std::vector<double> defect_f1, defect_auroc;
  std::vector<double> zone_accuracy;  // A..D at P >= 0.5
  float threshold = 0.5f;
  PassFigures pass;
  double pass_auroc = 0;
};
InspectReport inspect_report(const InspectOutputs& out, const std::vector<std::string>& names,
                             float threshold);
// "val inspect: pass/fail acc 0.981 false-accept 0.009 false-reject 0.03 at P(pass) >= 0.87 |
// F1 clean 0.99 ... | AUROC ..." for the log.
std::string inspect_line(const std::string& split, const InspectReport& report);

}  // namespace ringtrain::train
