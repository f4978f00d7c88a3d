// view_average.cpp — the views' forward passes and the averages' loss.
#include "ringtrain/train/view_average.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/train/inspect_metrics.hpp"

namespace ringtrain::train {
namespace {

// Adds softmax(row) of each of rows rows to sum.
void add_softmax(const std::vector<float>& logits, size_t classes, std::vector<double>& sum) {
  for (size_t r = 0; r * classes < logits.size(); ++r) {
    const float* z = logits.data() + r * classes;
    const double top = *std::max_element(z, z + classes);
    double total = 0;
    for (size_t k = 0; k < classes; ++k) total += std::exp(double(z[k]) - top);
    for (size_t k = 0; k < classes; ++k) sum[r * classes + k] += std::exp(double(z[k]) - top) / total;
  }
}

// p clamped away from 0 and 1, so a confident wrong answer costs a finite loss.
double clamped(double p) { return std::min(std::max(p, 1e-12), 1.0 - 1e-12); }

}  // namespace

ViewProbabilities average_over_views(nn::Model& model, backend::Backend& be,
                                     const std::vector<float>& images, const backend::Shape& shape,
                                     const std::vector<data::AugmentParams>& views,
                                     backend::Tensor& input) {
  const int c = int(shape[1]), h = int(shape[2]), w = int(shape[3]);
  const size_t image = size_t(c) * size_t(h) * size_t(w), n = size_t(shape[0]);
  const size_t classes = size_t(model.classes());
  ViewProbabilities sum;
  sum.classes.assign(n * classes, 0.0);
  std::vector<float> view(images.size()), host;
  if (input.empty() || input.shape() != shape) input = be.alloc(shape);
  for (const data::AugmentParams& v : views) {
    for (size_t i = 0; i < n; ++i)
      data::view_image(images.data() + i * image, c, h, w, v, view.data() + i * image);
    be.upload(view.data(), input);
    const backend::Tensor& logits = model.forward(input, false);
    host.resize(size_t(logits.numel()));
    be.download(logits, host.data());
    add_softmax(host, classes, sum.classes);
    if (!model.inspect()) continue;
    for (nn::Head head : {nn::Head::kDefects, nn::Head::kPass, nn::Head::kZones}) {
      const backend::Tensor& out = model.inspect()->output(head);
      host.resize(size_t(out.numel()));
      be.download(out, host.data());
      std::vector<double>& acc = sum.heads[size_t(head)];
      acc.resize(host.size(), 0.0);
      for (size_t k = 0; k < host.size(); ++k) acc[k] += sigmoid_probability(host[k]);
    }
  }
  const double views_count = double(views.size());
  for (double& p : sum.classes) p /= views_count;
  for (std::vector<double>& head : sum.heads)
    for (double& p : head) p /= views_count;
  return sum;
}

backend::LossResult loss_of_probabilities(const std::vector<double>& probs, const int32_t* labels,
                                          int64_t n, int64_t classes) {
  backend::LossResult r;
  r.count = n;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double* row = probs.data() + i * classes;
    total -= std::log(clamped(row[labels[i]]));
    r.correct += std::max_element(row, row + classes) - row == labels[i];
  }
  r.loss = n > 0 ? total / double(n) : 0.0;
  return r;
}

double bce_of_probabilities(const std::vector<double>& probs, const float* targets) {
  double total = 0;
  for (size_t k = 0; k < probs.size(); ++k) {
    const double p = clamped(probs[k]), t = targets[k];
    total -= t * std::log(p) + (1 - t) * std::log(1 - p);
  }
  return probs.empty() ? 0.0 : total / double(probs.size());
}

}  // namespace ringtrain::train
