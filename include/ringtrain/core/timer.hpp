// timer.hpp — monotonic wall-clock timing for phases, in seconds.
#pragma once

#include <chrono>

namespace ringtrain {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
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

}  // namespace ringtrain
