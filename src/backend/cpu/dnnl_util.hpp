// dnnl_util.hpp — what the oneDNN ops share: the engine, layouts on Tensors, allocation,
// cached reorders and the error wrapper. Internal to src/backend/cpu.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// How many convolutions compute their weight gradient each way, and their input gradient
// (counted at each one's first backward pass of that kind, which decides it).
struct ConvPathCount {
  int gemm = 0;
  int onednn = 0;
  int data_forward = 0;
  int data_onednn = 0;
};

// With ConvAlgorithm::kWinograd: how many training convolutions took oneDNN's Winograd kernels
// for all three passes, and how many could not (the shape, bf16, or a pass oneDNN has no
// Winograd kernel for) and run direct, counted at each one's first backward-weights pass.
struct ConvAlgorithmCount {
  int winograd = 0;
  int direct = 0;
};

// How many ops of a fused kind (batch norm + ReLU + max pool, batch norm + residual + ReLU)
// run our own loops, and how many oneDNN's primitives one after the other (a layout the loops
// do not walk, or the environment's switch), counted at each one's first training forward.
struct FusedCount {
  int fused = 0;
  int composed = 0;
};

// Host memory grown to the largest request and handed to whichever op asks next: for what an
// op needs only while one call runs, shared by all the ops of a backend (they run one after
// another on its stream) instead of each keeping its own.
class SharedScratch {
 public:
  // At least `bytes` of memory, 64-byte aligned: the same block as before unless it was
  // smaller (then a larger one replaces it, and earlier pointers are stale).
  void* at_least(size_t bytes);

 private:
  Tensor block_;
};

// What an op's call brings into a primitive's (or our loops') layouts and drops when it
// returns: x, dy, a second operand of the same size (a batch norm's residual, a sum's second
// gradient or input), weights (a linear's forward's, backward data's; the weight gradient
// before its reorder into the plain one), the filters turned for backward data by the forward
// kernel, and the matmul weight-gradient path's unfolded input and product
// (conv_weight_gemm.hpp). No call takes one of them twice. (A convolution's forward weights
// outlive the call: backward data reads them, so they stay the op's.)
struct CallScratch {
  SharedScratch x, dy, second, weights, filters, col, product;
};

// The engine and stream every op of one backend uses, what activations are stored in (f32, or
// bf16 for train.precision = bf16: weights are then multiplied in bf16 too, while parameters,
// gradients and statistics stay f32), and the path of convolution weight gradients.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dt act = dt::f32;
  ConvWeightGrad weight_grad = ConvWeightGrad::kOnednn;
  ConvAlgorithm conv_algorithm = ConvAlgorithm::kDirect;
  mutable ConvPathCount conv_path_count;  // the ops hold a const Context
  mutable ConvAlgorithmCount conv_algorithm_count;
  // The widest pack of channel lanes our own loops take (channel_runs.hpp): kWidestPack, or 8
  // under RINGTRAIN_CPU_PACK_LANES=8 (the tests' way to run the bundle's width here).
  int pack_lanes = 8;
  mutable FusedCount norm_pool_count;
  mutable FusedCount pool_relu_count;
  mutable FusedCount norm_add_count;
  mutable FusedCount norm_count;  // training batch norms: our own passes (fused), oneDNN's
  mutable ReorderTime reorders;   // every CachedReorder's runs
  mutable CallScratch call_scratch;
};

dt to_dnnl(DType dtype);

// oneDNN's description of a tensor's memory, attached to Tensors in blocked layouts.
struct DnnlLayout : Layout {
  explicit DnnlLayout(memory::desc d) : md(std::move(d)) {}
  memory::desc md;
};

// Runs f, turning a dnnl::error into a ringtrain::Error that says what was being done.
template <typename F>
auto dnnl_try(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw Error(str("oneDNN: ", what, ": ", e.what(), " (status ", int(e.status), ")"));
  }
}

memory::dims to_dims(const Shape& shape);
// Plain row-major desc of a shape: x, nc, nchw.
memory::desc plain_desc(const Shape& shape, dt type = dt::f32);
// The tensor's desc: its layout, or plain.
memory::desc desc_of(const Tensor& t);
memory mem_of(const Context& ctx, const Tensor& t);
// Makes t a tensor of `shape` in layout md, reallocating only when either changed
// (a view is never reallocated: its desc must already match).
void ensure(Tensor& t, const Shape& shape, const memory::desc& md);

// Makes t a plain fp32 vector of n values (a batch norm's per-channel statistics).
void ensure_vector(Tensor& t, int64_t n);

// A reorder primitive rebuilt only when the descs change; each run is timed into
// ctx.reorders (oneDNN's CPU stream runs it in the calling thread).
class CachedReorder {
 public:
  void run(const Context& ctx, const memory& src, const memory& dst);

 private:
  memory::desc from_, to_;
  dnnl::reorder prim_;
};

// Returns t's memory in layout `want`: t itself when it already is, else a reorder of it
// into scratch (allocated once per layout): what an op keeps past the call.
memory as_layout(const Context& ctx, const Tensor& t, const memory::desc& want, Tensor& scratch,
                 CachedReorder& reorder);
// The same into shared scratch (what one call needs: the reorder's result is valid until the
// scratch's next use).
memory as_layout(const Context& ctx, const memory& src, const memory::desc& want,
                 SharedScratch& scratch, CachedReorder& reorder);
memory as_layout(const Context& ctx, const Tensor& t, const memory::desc& want,
                 SharedScratch& scratch, CachedReorder& reorder);

// Reorders src (any layout) into dst's memory given as desc + pointer.
void reorder_to(const Context& ctx, const memory& src, const memory& dst, CachedReorder& r);

}  // namespace ringtrain::backend::cpu
