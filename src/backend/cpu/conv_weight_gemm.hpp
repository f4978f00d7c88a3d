// conv_weight_gemm.hpp — a convolution's weight gradient as one matmul over the unfolded input
// (im2col), the path train.conv_weight_grad = gemm takes. Internal to src/backend/cpu.
#pragma once

#include "dnnl_util.hpp"

namespace ringtrain::backend::cpu {

// dW[O, I, KH, KW] = sum over output pixels p of dy[p, O] x col[p, (KH, KW, I)], where col
// holds, for each output pixel, the input patch it saw. x and dy are taken in any layout and
// brought to NHWC first; the matmul accumulates in fp32 and its [O, KH, KW, I] result is
// reordered into the plain gradient. For shapes where oneDNN's backward-weights kernel is
// slow (strided and small-image convolutions; docs/TUNING.md) this runs at the matmul's speed.
// Bitwise repeatable for a fixed thread count: the unfold is a copy, the matmul has no atomics.
class ConvWeightGemm {
 public:
  ConvWeightGemm(const Context& ctx, const ConvSpec& spec, const Shape& x_shape,
                 const Shape& y_shape);
  // dw: plain f32 [O, I, KH, KW] memory of spec's shape, overwritten.
  void run(const memory& x, const memory& dy, float* dw);

 private:
  void unfold(const void* x_nhwc);

  const Context& ctx_;
  ConvSpec s_;
  int64_t n_, c_, h_, w_, oh_, ow_;
  bool unfold_needed_;  // a 1x1, stride-1 convolution multiplies the NHWC input as it is
  // dy_as_a_: dy's NHWC memory seen as [O, pixels] (transposed), the matmul's first operand.
  memory::desc x_nhwc_, dy_nhwc_, dy_as_a_, col_md_, dw_ohwi_, dw_plain_;
  Tensor x_scratch_, dy_scratch_, col_, dw_ohwi_scratch_;
  CachedReorder x_reorder_, dy_reorder_, dw_reorder_;
  dnnl::matmul matmul_;
};

}  // namespace ringtrain::backend::cpu
