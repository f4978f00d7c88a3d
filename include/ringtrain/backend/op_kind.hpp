// op_kind.hpp — the kinds of op a step is split into: the per-op profile's rows
// (profiled_backend.hpp) and the memory ledger's tags (memory_ledger.hpp).
#pragma once

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

}  // namespace ringtrain::backend
