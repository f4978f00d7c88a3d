// fault.cpp — the RINGTRAIN_FAULT kill points and flipped weight bit, RINGTRAIN_STOP_AT stop points
// and RINGTRAIN_NONFINITE_AT poisoned gradients, RINGTRAIN_DROP_MESSAGE lost messages
// (core/fault.hpp).
#include "ringtrain/core/fault.hpp"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace ringtrain {
namespace {

// An environment variable of the form NAME or NAME@N; name is empty when it is unset.
struct PointSpec {
  std::string name;
  long number;
  PointSpec(const char* variable, long default_number) : number(default_number) {
    const char* env = std::getenv(variable);
    if (!env || !*env) return;
    name = env;
    if (size_t sep = name.find('@'); sep != std::string::npos) {
      number = std::strtol(name.c_str() + sep + 1, nullptr, 10);
      name.resize(sep);
    }
  }
};

}  // namespace

void fault_point(const char* name) {
  static const PointSpec kill_at("RINGTRAIN_FAULT", 1);  // N: the hit that kills
  if (kill_at.name.empty() || kill_at.name != name) return;
  static std::atomic<long> hits{0};
  if (++hits == kill_at.number) raise(SIGKILL);
}

void fault_point_for_rank(const char* name, int rank) {
  static const PointSpec stop_at("RINGTRAIN_STOP_AT", -1);  // N: the rank that stops
  if (stop_at.name.empty() || stop_at.name != name || stop_at.number != rank) return;
  static std::atomic<bool> stopped{false};
  if (!stopped.exchange(true)) raise(SIGSTOP);
}

bool nonfinite_fault_at(int64_t step, int rank) {
  static const PointSpec poison_at("RINGTRAIN_NONFINITE_AT", -1);  // STEP@RANK
  return !poison_at.name.empty() && poison_at.number == rank &&
         std::strtol(poison_at.name.c_str(), nullptr, 10) == step;
}

bool flip_weight_fault_at(int64_t step, int rank) {
  static const PointSpec flip_at("RINGTRAIN_FAULT", -1);  // flip-weight:RANK@STEP
  static const std::string prefix = "flip-weight:";
  if (flip_at.name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::strtol(flip_at.name.c_str() + prefix.size(), nullptr, 10) == rank &&
         flip_at.number == step;
}

bool drop_message_fault(int rank) {
  static const PointSpec drop_at("RINGTRAIN_DROP_MESSAGE", -1);  // N@RANK
  if (drop_at.name.empty() || drop_at.number != rank) return false;
  static std::atomic<long> sent{0};
  return ++sent == std::strtol(drop_at.name.c_str(), nullptr, 10);
}

}  // namespace ringtrain
