// backend_list.hpp — the backends the backend and gradient tests run on: those built into
// this ringtrain that have a device here. A CUDA build on a machine without a GPU says so
// once per test binary and runs the rest.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"

namespace rt_test {

// True when the CUDA backend is built and a GPU is visible; prints the skip line once.
inline bool cuda_testable() {
  static const bool testable = [] {
    if (!RINGTRAIN_HAS_CUDA) return false;
    if (ringtrain::backend::cuda_device_count() > 0) return true;
    std::printf("backend cuda: skipped (built, no GPU: %s)\n",
                ringtrain::backend::cuda_device_status().c_str());
    std::fflush(stdout);
    return false;
  }();
  return testable;
}

// The fast backends the op tests hold against "ref": cpu, and cuda when testable.
inline std::vector<std::string> testable_backends() {
  std::vector<std::string> names{"cpu"};
  if (cuda_testable()) names.push_back("cuda");
  return names;
}

// The backends the finite-difference gradient checks run on: ref, and cuda when testable.
inline std::vector<std::string> gradcheck_backends() {
  std::vector<std::string> names{"ref"};
  if (cuda_testable()) names.push_back("cuda");
  return names;
}

}  // namespace rt_test
