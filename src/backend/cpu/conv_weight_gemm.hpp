// conv_weight_gemm.hpp — a convolution's weight gradient as one matmul over the unfolded input
// (im2col), the path train.conv_weight_grad = gemm takes. Internal to src/backend/cpu.
#pragma once

#include <cstdint>
#include <vector>

#include "dnnl_util.hpp"

namespace ringtrain::backend::cpu {

// The weight gradient as a product over output pixels p of the input patch each saw (col)
// and dy, in one of two orientations (docs/TUNING.md has the measurements behind them):
// - stride 1, output the input's size (3x3 with padding 1, 1x1): dW^T[(I, KH, KW), O] =
//   colT[(I, KH, KW), p] x dy[p, O]. colT's rows are the image planes shifted by each kernel
//   tap (one masked copy a plane, from NCHW x), and the contraction runs along rows of both
//   operands, which oneDNN's matmul reads fastest (twice as fast as the other orientation on
//   64-channel layers). It runs in chunks of images, their products summed in order.
// - strided and the rest: dW[O, (KH, KW, I)] = dy^T[O, p] x col[p, (KH, KW, I)], col holding
//   each pixel's patch (runs of I channels copied from NHWC x), cheaper to unfold there.
// x and dy are reordered from their layouts first, the matmul accumulates in fp32, and its
// result is reordered into the plain gradient. x and dy in the matmul's layouts, the unfold
// and the product live in the backend's shared scratch (Context::call_scratch): what the
// largest convolution needs, not a copy of each convolution's x and dy kept beside them.
// Bitwise repeatable for a fixed thread count: the unfold is a copy, the matmul has no atomics.
class ConvWeightGemm {
 public:
  ConvWeightGemm(const Context& ctx, const ConvSpec& spec, const Shape& x_shape,
                 const Shape& y_shape);
  // dw: plain f32 [O, I, KH, KW] memory of spec's shape, overwritten. x and dy in the
  // matmul's layouts, the unfold and the product go to `scratch` (the backend's
  // Context::call_scratch, or measure's own while it times the path).
  void run(const memory& x, const memory& dy, float* dw, CallScratch& scratch);

 private:
  template <typename U>
  void unfold_planes(const U* x_nchw, U* col, int64_t first_image, int64_t images) const;
  void unfold_patches(const void* x_nhwc, void* col) const;
  void run_planes(const memory& x_nchw, const memory& dy_nhwc, void* col, const memory& product);
  // The first orientation's matmul over a chunk of `images` images, writing the product or
  // adding to it (made once for each, and for a last, shorter chunk).
  struct ChunkMatmul {
    int64_t images;
    bool accumulate;
    memory::desc col_md, dy_md;
    dnnl::matmul prim;
  };
  ChunkMatmul& chunk_matmul(int64_t images, bool accumulate);

  const Context& ctx_;
  ConvSpec s_;
  int64_t n_, c_, h_, w_, oh_, ow_;
  bool planes_;  // the first orientation above
  // dy_t_md_: dy's NHWC memory seen as dy^T (the second orientation); product_as_w_: the
  // matmul's result seen as [O, I, KH, KW].
  memory::desc x_md_, dy_nhwc_, dy_t_md_, col_md_, product_md_, product_as_w_, dw_plain_;
  CachedReorder x_reorder_, dy_reorder_, dw_reorder_;
  dnnl::matmul matmul_;  // the second orientation's
  // The first orientation runs over chunks of about kChunkPixels output pixels (whole images),
  // so that the matmul reads each chunk's unfold back from cache rather than memory and col
  // holds one chunk (docs/TUNING.md has the measurements behind the size).
  static constexpr int64_t kChunkPixels = 4096;
  int64_t chunk_images_ = 0;
  std::vector<uint8_t> inside_;  // [(ky, kx), pixel]: 1 where the tap's read lies in the image
  std::vector<ChunkMatmul> chunk_matmuls_;
};

}  // namespace ringtrain::backend::cpu
