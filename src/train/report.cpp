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

size_t warmup_steps(size_t steps) {
  return std::min<size_t>(3, steps / 4);
}

io::Summary summarise(const io::Timings& t, const io::CommRecords& c, size_t warm,
                      int64_t global_batch) {
  io::Summary s;
  const int world = t.world_size;
  const int64_t steps = t.steps;
  const auto& step = t.phases.at("step");
  const auto& wait = t.phases.at("allreduce_wait");
  auto at = [steps](int r, int64_t k) { return size_t(r * steps + k); };
  // Allreduce wall time per rank and step, and comm thread CPU time.
  std::vector<double> comm(size_t(world * steps), 0);
  double comm_cpu = 0;
  for (size_t i = 0; i < c.rank.size(); ++i) {
    if (c.step[i] < int64_t(warm) || c.step[i] >= steps) continue;
    comm[at(int(c.rank[i]), c.step[i])] += c.seconds[i];
    comm_cpu += c.cpu_seconds[i];
  }
  double slowest_sum = 0, waits = 0, comms = 0, last_waits = 0, last_comms = 0;
  std::vector<double> rank_total(world, 0);
  for (int64_t k = int64_t(warm); k < steps; ++k) {
    double slowest = 0;
    int last = 0;
    for (int r = 0; r < world; ++r) {
      slowest = std::max(slowest, step[at(r, k)]);
      rank_total[r] += step[at(r, k)];
      waits += wait[at(r, k)];
      comms += comm[at(r, k)];
      if (wait[at(r, k)] < wait[at(last, k)]) last = r;
    }
    slowest_sum += slowest;
    last_waits += wait[at(last, k)];
    last_comms += comm[at(last, k)];
  }
  const double timed = double(steps - int64_t(warm));
  s.images_per_s = slowest_sum > 0 ? double(global_batch) * timed / slowest_sum : 0;
  double max_total = 0, mean_total = 0;
  for (int r = 0; r < world; ++r) {
    max_total = std::max(max_total, rank_total[r]);
    mean_total += rank_total[r] / world;
  }
  s.load_imbalance = mean_total > 0 ? max_total / mean_total : 1;
  s.exposed_comm_fraction = world > 1 && comms > 0 ? std::min(1.0, waits / comms) : 0;
  s.exposed_comm_fraction_last_rank =
      world > 1 && last_comms > 0 ? std::min(1.0, last_waits / last_comms) : 0;
  s.comm_cpu_fraction = mean_total > 0 ? comm_cpu / world / mean_total : 0;
  return s;
}

io::AutotuneRecord autotune_record(const comm::fusion::AutotuneReport& report,
                                   const std::string& overlap_setting,
                                   const std::string& fusion_mib_setting) {
  io::AutotuneRecord a;
  a.overlap_setting = overlap_setting;
  a.fusion_mib_setting = fusion_mib_setting;
  a.source = report.source;
  a.reason = report.reason;
  a.chosen_overlap = report.chosen.overlap;
  a.chosen_fusion_mib = report.chosen.fusion_mib;
  a.decided_at_step = report.decided_at_step;
  a.search_steps = report.search_steps;
  a.steps_per_trial = report.steps_per_trial;
  a.cost_s = report.cost_s;
  a.chosen_step_s = report.chosen_step_s;
  for (const comm::fusion::Trial& t : report.trials) {
    a.trial_overlap.push_back(t.settings.overlap);
    a.trial_fusion_mib.push_back(t.settings.fusion_mib);
    a.trial_first_step.push_back(t.first_step);
    a.trial_steps.push_back(t.steps);
    a.trial_step_s.insert(a.trial_step_s.end(), t.rank_median_s.begin(), t.rank_median_s.end());
    a.trial_slowest_s.push_back(t.slowest_s);
  }
  return a;
}

}  // namespace ringtrain::train
