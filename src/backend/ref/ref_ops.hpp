// ref_ops.hpp — constructors of the reference op objects (internal to src/backend/ref).
#pragma once

#include <memory>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::ref {

std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec);
std::unique_ptr<LinearOp> make_linear(const LinearSpec& spec);
std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& spec);
std::unique_ptr<ReluOp> make_relu();
std::unique_ptr<PoolOp> make_pool(const PoolSpec& spec);
std::unique_ptr<AddOp> make_add(bool fuse_relu);

}  // namespace ringtrain::backend::ref
