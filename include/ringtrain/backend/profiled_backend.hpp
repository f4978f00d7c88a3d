// profiled_backend.hpp — a backend that forwards every call to another and times each op by
// kind (convolution forward, backward-data, backward-weights, matmul, batch norm, ...) with
// the floating-point work of the products: the per-op profile of rt-bench-compute --profile.
//
// Each timed call ends with the inner backend's synchronize(), so a time is the op's own on
// any backend: free on the cpu (oneDNN's CPU stream runs in the calling thread), a stop of the
// queue after every op on a GPU (kernel times there: tools/gpu-profile.sh).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

enum class OpKind {
  kConvForward,
  kConvBackwardData,
  kConvBackwardWeights,
  kMatmulForward,
  kMatmulBackwardData,
  kMatmulBackwardWeights,
  kBatchNormForward,  // a fused batch norm + ReLU + max pool (a stem) included
  kBatchNormBackward,
  kRelu,
  kPool,
  kAdd,
  kReorder,  // layout reorders inside the ops above (Backend::reorder_time), taken out of theirs
  kLoss,
  kOptimizer,  // sgd_update, adaptive_update, sum_of_squares (LARS/LAMB norms, clipping)
  kTransfer,   // upload, download, copy
  kOther,      // fill, scale, axpby, the finiteness checks and digests
};
constexpr int kOpKinds = int(OpKind::kOther) + 1;

// "conv_fwd", "conv_bwd_data", ...: the JSON keys and table rows.
const char* op_kind_key(OpKind kind);

struct OpProfile {
  std::array<double, kOpKinds> seconds{};
  std::array<int64_t, kOpKinds> calls{};
  std::array<double, kOpKinds> flops{};  // products only: 2 multiply-adds per MAC

  void clear() { *this = OpProfile{}; }
  double total_seconds() const;
};

// Wraps inner; every op made through the result adds to *profile. Precision, name, threads
// and the rest are inner's.
std::unique_ptr<Backend> make_profiled_backend(std::unique_ptr<Backend> inner,
                                               std::shared_ptr<OpProfile> profile);

}  // namespace ringtrain::backend
