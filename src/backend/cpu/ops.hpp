// ops.hpp — constructors of the oneDNN op objects (internal to src/backend/cpu).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "dnnl_util.hpp"

namespace ringtrain::backend::cpu {

// Op objects keep a reference to ctx: they must not outlive their backend.
std::unique_ptr<ConvOp> make_conv(const Context& ctx, const ConvSpec& spec);
std::unique_ptr<LinearOp> make_linear(const Context& ctx, const LinearSpec& spec);
// Where the layout allows: own_passes, training forward and backward run our own passes
// (norm_passes.hpp; RINGTRAIN_CPU_BATCH_NORM unset or own), else oneDNN's primitives;
// fuse_residual, forward_training_add_relu runs our own pass (RINGTRAIN_CPU_NORM_ADD unset or
// fused).
struct BatchNormPaths {
  bool own_passes = true;
  bool fuse_residual = true;
};
std::unique_ptr<BatchNormOp> make_batch_norm(const Context& ctx, const BatchNormSpec& spec,
                                             BatchNormPaths paths);
std::unique_ptr<ReluOp> make_relu(const Context& ctx);
std::unique_ptr<PoolOp> make_pool(const Context& ctx, const PoolSpec& spec);
// Our own loops; `composed` (the backend's batch norm and pool ops) runs where they do not walk
// the input's layout, and everywhere without `fuse` (RINGTRAIN_CPU_NORM_POOL=separate).
std::unique_ptr<NormReluMaxPoolOp> make_norm_relu_max_pool(
    const Context& ctx, const NormReluMaxPoolSpec& spec,
    std::unique_ptr<NormReluMaxPoolOp> composed, bool fuse);
// Max pool (window x window, stride window) then ReLU as our own loops; `composed` (the
// backend's pool and ReLU ops) as above (RINGTRAIN_CPU_POOL_RELU=separate).
std::unique_ptr<PoolOp> make_max_pool_relu(const Context& ctx, int window,
                                           std::unique_ptr<PoolOp> composed, bool fuse);
std::unique_ptr<AddOp> make_add(const Context& ctx, bool fuse_relu);

}  // namespace ringtrain::backend::cpu
