// backend_list.hpp — the backends the backend and gradient tests run on: those built into
// this ringtrain that have a device here. A CUDA build on a machine without a GPU says so
// once per test binary and runs the rest.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/core/error.hpp"

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

// A precondition for GPU-only cases: skipped, and said why, where cuda_testable() is false.
struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result result(cuda_testable());
    result.message() << "needs a GPU (" << ringtrain::backend::cuda_device_status() << ")";
    return result;
  }
};

// The fast backends the op tests hold against "ref": cpu, and cuda when testable.
inline std::vector<std::string> testable_backends() {
  std::vector<std::string> names{"cpu"};
  if (cuda_testable()) names.push_back("cuda");
  return names;
}

// Backend `name` (2 threads) in `precision`, or null where it refuses that precision here
// (cpu bf16 without AVX512-BF16 or AMX), with "<what>, <name>: skipped: <why>" printed.
// deterministic: cuda chooses its algorithms by cuDNN's heuristic order, not by timing (the
// other backends have no such choice).
inline std::unique_ptr<ringtrain::backend::Backend> backend_or_skip(
    const std::string& what, const std::string& name, ringtrain::backend::Precision precision,
    bool deterministic = false) {
  try {
    if (name == "cuda" && deterministic) {
      ringtrain::backend::CudaOptions options;
      options.deterministic = true;
      options.precision = precision;
      return ringtrain::backend::make_cuda_backend(options);
    }
    return ringtrain::backend::make_backend(name, 2, precision);
  } catch (const ringtrain::InputError& e) {
    std::printf("%s, %s: skipped: %s\n", what.c_str(), name.c_str(), e.what());
    return nullptr;
  }
}

// The backends the finite-difference gradient checks run on: ref, and cuda when testable.
inline std::vector<std::string> gradcheck_backends() {
  std::vector<std::string> names{"ref"};
  if (cuda_testable()) names.push_back("cuda");
  return names;
}

}  // namespace rt_test
