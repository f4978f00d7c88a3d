// fault.cpp — the RINGTRAIN_FAULT kill points (core/fault.hpp).
#include "ringtrain/core/fault.hpp"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ringtrain {
namespace {

struct FaultPlan {
  std::string name;  // empty: no fault asked for
  long at = 1;       // the hit that kills
  FaultPlan() {
    const char* env = std::getenv("RINGTRAIN_FAULT");
    if (!env || !*env) return;
    name = env;
    if (size_t sep = name.find('@'); sep != std::string::npos) {
      at = std::strtol(name.c_str() + sep + 1, nullptr, 10);
      name.resize(sep);
    }
  }
};

const FaultPlan& plan() {
  static const FaultPlan p;
  return p;
}

struct StopPlan {
  std::string name;  // empty: none asked for
  long rank = -1;
  StopPlan() {
    const char* env = std::getenv("RINGTRAIN_STOP_AT");
    if (!env || !*env) return;
    name = env;
    if (size_t sep = name.find('@'); sep != std::string::npos) {
      rank = std::strtol(name.c_str() + sep + 1, nullptr, 10);
      name.resize(sep);
    }
  }
};

}  // namespace

void fault_point_for_rank(const char* name, int rank) {
  static const StopPlan p;
  if (p.name.empty() || p.name != name || p.rank != rank) return;
  static std::atomic<bool> stopped{false};
  if (!stopped.exchange(true)) raise(SIGSTOP);
}

void fault_point(const char* name) {
  const FaultPlan& p = plan();
  if (p.name.empty() || p.name != name) return;
  static std::atomic<long> hits{0};
  if (++hits == p.at) raise(SIGKILL);
}

}  // namespace ringtrain
