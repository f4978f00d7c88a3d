// profiled_backend.hpp — a backend that forwards every call to another and times each op by
// kind (convolution forward, backward-data, backward-weights, matmul, batch norm, ...) with
// the floating-point work of the products: the per-op profile of rt-bench-compute --profile;
// and books the tensor memory each op takes under its kind (rt-bench-compute --memory-map).
//
// Each timed call ends with the inner backend's synchronize(), so a time is the op's own on
// any backend: free on the cpu (oneDNN's CPU stream runs in the calling thread), a stop of the
// queue after every op on a GPU (kernel times there: tools/gpu-profile.sh).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/op_kind.hpp"

namespace ringtrain::backend {

struct OpProfile {
  std::array<double, kOpKinds> seconds{};
  std::array<int64_t, kOpKinds> calls{};
  std::array<double, kOpKinds> flops{};  // products only: 2 multiply-adds per MAC

  void clear() { *this = OpProfile{}; }
  double total_seconds() const;
};

// Wraps inner; every op made through the result adds to *profile, and books the memory it
// takes under its kind (memory_ledger.hpp). With a null profile only the memory is booked:
// nothing is timed and nothing waits. Precision, name, threads and the rest are inner's.
std::unique_ptr<Backend> make_profiled_backend(std::unique_ptr<Backend> inner,
                                               std::shared_ptr<OpProfile> profile);

}  // namespace ringtrain::backend
