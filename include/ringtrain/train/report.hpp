// report.hpp — what rank 0 prints: the deck box at start, progress lines, the end summary;
// and the per-step phase timings those are computed from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ringtrain/comm/fusion/autotune.hpp"
#include "ringtrain/io/results.hpp"

namespace ringtrain::train {

// One step's phase times, seconds.
struct StepTimes {
  double data = 0, forward = 0, backward = 0, allreduce_wait = 0, optimizer = 0, step = 0;
};

// Every step of this rank, phase by phase (the columns of /timings).
class PhaseLog {
 public:
  void reserve(size_t steps);
  void add(const StepTimes& t);
  size_t steps() const { return step_.size(); }
  // Phase name ("data", ...) -> one value per step.
  std::map<std::string, std::vector<double>> columns() const;
  // Means over steps [first, last).
  StepTimes mean(size_t first, size_t last) const;

 private:
  std::vector<double> data_, forward_, backward_, wait_, optimizer_, step_;
};

// "1h02m", "3m07s", "12s".
std::string format_duration(double seconds);

// The effective deck in a box, with a header line about the run.
std::string deck_box(const std::string& header, const std::string& deck);

// `epoch step | loss acc | img/s | step ms (data fwd bwd wait opt) | ETA`
struct Progress {
  int epoch = 0, epochs = 0;
  int64_t step = 0, steps = 0;
  double loss = 0, acc = 0, images_per_s = 0, eta_s = 0;
  StepTimes ms;  // milliseconds
};
std::string progress_line(const Progress& p);

// Steps that count for throughput: all but the first few, which build primitives.
size_t warmup_steps(size_t steps);

// /summary from every rank's timings and bucket records, over the steps from `warm` on:
// images/s at the pace of the slowest rank of each step, load imbalance, the comm thread's
// CPU share, and exposed communication two ways. exposed_comm_fraction: every rank's wait in
// synchronize() over every rank's allreduce time. exposed_comm_fraction_last_rank: per step
// only the rank that reached synchronize() last (the least wait), over its own allreduce
// time: the communication backward did not hide, without the time the other ranks spent
// waiting for that rank's compute (imbalance). Leaves the test, efficiency and epoch fields.
io::Summary summarise(const io::Timings& t, const io::CommRecords& c, size_t warm,
                      int64_t global_batch);

// /autotune from rank 0's report; the settings as the deck gave them (auto or a value).
io::AutotuneRecord autotune_record(const comm::fusion::AutotuneReport& report,
                                   const std::string& overlap_setting,
                                   const std::string& fusion_mib_setting);

}  // namespace ringtrain::train
