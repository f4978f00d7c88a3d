// report.cpp — formatting of rank 0's deck box, progress lines, and the phase log.
#include "ringtrain/train/report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ringtrain::train {

void PhaseLog::reserve(size_t steps) {
  for (auto* v : {&data_, &forward_, &backward_, &wait_, &optimizer_, &step_}) v->reserve(steps);
}

void PhaseLog::add(const StepTimes& t) {
  data_.push_back(t.data);
  forward_.push_back(t.forward);
  backward_.push_back(t.backward);
  wait_.push_back(t.allreduce_wait);
  optimizer_.push_back(t.optimizer);
  step_.push_back(t.step);
}

std::map<std::string, std::vector<double>> PhaseLog::columns() const {
  return {{"data", data_},           {"forward", forward_},     {"backward", backward_},
          {"allreduce_wait", wait_}, {"optimizer", optimizer_}, {"step", step_}};
}

StepTimes PhaseLog::mean(size_t first, size_t last) const {
  StepTimes m;
  last = std::min(last, step_.size());
  if (first >= last) return m;
  auto avg = [&](const std::vector<double>& v) {
    double sum = 0;
    for (size_t i = first; i < last; ++i) sum += v[i];
    return sum / double(last - first);
  };
  m.data = avg(data_);
  m.forward = avg(forward_);
  m.backward = avg(backward_);
  m.allreduce_wait = avg(wait_);
  m.optimizer = avg(optimizer_);
  m.step = avg(step_);
  return m;
}

std::string format_duration(double seconds) {
  long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

std::string deck_box(const std::string& header, const std::string& deck) {
  std::vector<std::string> lines{header, ""};
  std::istringstream in(deck);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  size_t width = 0;
  for (const auto& l : lines) width = std::max(width, l.size());
  std::string rule = "+" + std::string(width + 2, '-') + "+\n";
  std::string out = rule;
  for (const auto& l : lines) {
    if (l.empty()) {
      out += rule;
      continue;
    }
    out += "| " + l + std::string(width - l.size(), ' ') + " |\n";
  }
  return out + rule;
}

std::string progress_line(const Progress& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "epoch %d/%d step %4lld/%lld | loss %.4f acc %.3f | %7.1f img/s | step %.1f ms "
                "(data %.1f fwd %.1f bwd %.1f wait %.1f opt %.1f) | ETA %s",
                p.epoch, p.epochs, (long long)p.step, (long long)p.steps, p.loss, p.acc,
                p.images_per_s, p.ms.step, p.ms.data, p.ms.forward, p.ms.backward,
                p.ms.allreduce_wait, p.ms.optimizer, format_duration(p.eta_s).c_str());
  return buf;
}

}  // namespace ringtrain::train
