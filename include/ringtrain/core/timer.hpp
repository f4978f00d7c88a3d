// timer.hpp — monotonic wall-clock timing for phases, the calling thread's CPU time, in
// seconds, the median of repeated timings, and the UTC time of day that results and
// checkpoints record.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

namespace ringtrain {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID): user and system.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The median of repeated timings: the middle value, or the mean of the two middle ones; 0 for
// none. The one median of the autotune and of every benchmark.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Measures seconds since construction or the last restart().
class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  void restart() { start_ = now_seconds(); }
  double seconds() const { return now_seconds() - start_; }

 private:
  double start_;
};

// Now, as ISO 8601 UTC: "2026-11-24T10:08:15Z".
inline std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace ringtrain
