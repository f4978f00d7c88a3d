// conv_weight_gemm.cpp — a convolution's weight gradient as im2col and one oneDNN matmul.
#include "conv_weight_gemm.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ringtrain::backend::cpu {

ConvWeightGemm::ConvWeightGemm(const Context& ctx, const ConvSpec& spec, const Shape& x_shape,
                               const Shape& y_shape)
    : ctx_(ctx),
      s_(spec),
      n_(x_shape[0]),
      c_(x_shape[1]),
      h_(x_shape[2]),
      w_(x_shape[3]),
      oh_(y_shape[2]),
      ow_(y_shape[3]),
      planes_(spec.stride == 1 && oh_ == h_ && ow_ == w_) {
  const int64_t o = spec.out_channels, k = spec.kernel;
  const int64_t pixels = n_ * oh_ * ow_, patch = c_ * k * k;
  dy_nhwc_ = memory::desc({n_, o, oh_, ow_}, ctx.act, tag::nhwc);
  dw_plain_ = memory::desc({o, c_, k, k}, dt::f32, tag::oihw);
  if (planes_) {
    chunk_images_ = std::clamp<int64_t>((kChunkPixels + h_ * w_ - 1) / (h_ * w_), 1, n_);
    x_md_ = memory::desc({n_, c_, h_, w_}, ctx.act, tag::nchw);
    col_md_ = memory::desc({patch, chunk_images_ * h_ * w_}, ctx.act, tag::ab);
    product_md_ = memory::desc({patch, o}, dt::f32, tag::ab);
    product_as_w_ = memory::desc({o, c_, k, k}, dt::f32, memory::dims{1, k * k * o, k * o, o});
    inside_.resize(size_t(k * k * h_ * w_));
    for (int64_t tap = 0; tap < k * k; ++tap)
      for (int64_t j = 0; j < h_ * w_; ++j) {
        const int64_t iy = j / w_ + tap / k - s_.padding, ix = j % w_ + tap % k - s_.padding;
        inside_[size_t(tap * h_ * w_ + j)] = iy >= 0 && iy < h_ && ix >= 0 && ix < w_;
      }
  } else {
    x_md_ = memory::desc({n_, c_, h_, w_}, ctx.act, tag::nhwc);
    col_md_ = memory::desc({pixels, patch}, ctx.act, tag::ab);
    dy_t_md_ = memory::desc({o, pixels}, ctx.act, memory::dims{1, o});  // dy^T
    product_md_ = memory::desc({o, patch}, dt::f32, tag::ab);
    product_as_w_ = memory::desc({o, c_, k, k}, dt::f32, tag::ohwi);
    matmul_ = dnnl_try("conv weight-gradient matmul", [&] {
      return dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(dy_t_md_, col_md_, product_md_), ctx.engine));
    });
  }
}

void ConvWeightGemm::run(const memory& x, const memory& dy, float* dw, CallScratch& scratch) {
  const memory x_unfolded = as_layout(ctx_, x, x_md_, scratch.x, x_reorder_);
  const memory dy_nhwc = as_layout(ctx_, dy, dy_nhwc_, scratch.dy, dy_reorder_);
  void* col = scratch.col.at_least(col_md_.get_size());
  const memory product(product_md_, ctx_.engine, scratch.product.at_least(product_md_.get_size()));
  if (planes_) {
    run_planes(x_unfolded, dy_nhwc, col, product);
  } else {
    unfold_patches(x_unfolded.get_data_handle(), col);
    matmul_.execute(ctx_.stream,
                    {{DNNL_ARG_SRC, memory(dy_t_md_, ctx_.engine, dy_nhwc.get_data_handle())},
                     {DNNL_ARG_WEIGHTS, memory(col_md_, ctx_.engine, col)},
                     {DNNL_ARG_DST, product}});
  }
  dw_reorder_.run(ctx_, memory(product_as_w_, ctx_.engine, product.get_data_handle()),
                  memory(dw_plain_, ctx_.engine, dw));
}

// Chunk by chunk in the images' order, so the sums are the same from run to run: the chunk's
// planes unfolded into col, then col x dy's rows of those images, written into the product by
// the first chunk and added to it by the rest (a sum post-op, in fp32).
void ConvWeightGemm::run_planes(const memory& x_nchw, const memory& dy_nhwc, void* col,
                                const memory& product) {
  const int64_t hw = h_ * w_, o = s_.out_channels;
  const size_t elem = memory::data_type_size(ctx_.act);
  for (int64_t first = 0; first < n_; first += chunk_images_) {
    const int64_t images = std::min(chunk_images_, n_ - first);
    if (ctx_.act == dt::bf16) {
      unfold_planes(static_cast<const uint16_t*>(x_nchw.get_data_handle()),
                    static_cast<uint16_t*>(col), first, images);
    } else {
      unfold_planes(static_cast<const uint32_t*>(x_nchw.get_data_handle()),
                    static_cast<uint32_t*>(col), first, images);
    }
    ChunkMatmul& mm = chunk_matmul(images, first > 0);
    auto* dy_rows = static_cast<char*>(dy_nhwc.get_data_handle()) + size_t(first * hw * o) * elem;
    mm.prim.execute(ctx_.stream, {{DNNL_ARG_SRC, memory(mm.col_md, ctx_.engine, col)},
                                  {DNNL_ARG_WEIGHTS, memory(mm.dy_md, ctx_.engine, dy_rows)},
                                  {DNNL_ARG_DST, product}});
  }
}

ConvWeightGemm::ChunkMatmul& ConvWeightGemm::chunk_matmul(int64_t images, bool accumulate) {
  for (auto& c : chunk_matmuls_)
    if (c.images == images && c.accumulate == accumulate) return c;
  const int64_t hw = h_ * w_, patch = c_ * s_.kernel * s_.kernel;
  ChunkMatmul c{images, accumulate, {}, {}, {}};
  // The chunk's columns of col (whose rows stay a full chunk long) and dy's rows.
  c.col_md = memory::desc({patch, images * hw}, ctx_.act, memory::dims{chunk_images_ * hw, 1});
  c.dy_md = memory::desc({images * hw, s_.out_channels}, ctx_.act, tag::ab);
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  c.prim = dnnl_try("conv weight-gradient matmul", [&] {
    return dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(c.col_md, c.dy_md, product_md_), attr, ctx_.engine));
  });
  chunk_matmuls_.push_back(std::move(c));
  return chunk_matmuls_.back();
}

// col[(i, ky, kx), (slot, oy, ox)] = x[first_image + slot, i, oy + ky - pad, ox + kx - pad]
// where that lies inside the image, else 0. At stride 1 and the input's size, tap (ky, kx)
// reads the image plane shifted by (ky - pad) rows and (kx - pad) columns: one flat pass per
// (row, image) copies the plane, with the places the shift moves outside the image masked to
// zero (small images, 4x4, would otherwise copy a few values per call). The pass stops where
// the shifted read would leave x's memory (the first and last planes; more of them for 1-row
// images) and writes the zeros the mask would: col is reused chunk after chunk. U is the
// element's bits (uint16_t for bf16, uint32_t for fp32): copied and masked, never computed on.
template <typename U>
void ConvWeightGemm::unfold_planes(const U* x, U* col, int64_t first_image, int64_t images) const {
  const int64_t k = s_.kernel, pad = s_.padding;
  const int64_t c = c_, w = w_, hw = h_ * w_, row_length = chunk_images_ * hw;
  const int64_t x_size = n_ * c * hw;
  const uint8_t* inside = inside_.data();
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < c * k * k; ++row) {
    const int64_t ch = row / (k * k), tap = row % (k * k);
    const int64_t shift = (tap / k - pad) * w + (tap % k - pad);
    const uint8_t* in = inside + tap * hw;
    for (int64_t slot = 0; slot < images; ++slot) {
      const int64_t from = ((first_image + slot) * c + ch) * hw + shift;  // x's, for pixel 0
      const int64_t lo = std::clamp<int64_t>(-from, 0, hw);
      const int64_t hi = std::clamp<int64_t>(x_size - from, lo, hw);
      U* out = col + row * row_length + slot * hw;
      std::fill(out, out + lo, U(0));
#pragma omp simd
      for (int64_t j = lo; j < hi; ++j) out[j] = x[from + j] & U(U(0) - U(in[j]));
      std::fill(out + hi, out + hw, U(0));
    }
  }
}

// col[(n, oy, ox), (ky, kx, c)] = x[n, oy*stride + ky - pad, ox*stride + kx - pad, c] where
// that lies inside the image, else 0 (col is shared scratch: every place is written).
void ConvWeightGemm::unfold_patches(const void* x_nhwc, void* col_out) const {
  const int64_t k = s_.kernel, stride = s_.stride, pad = s_.padding;
  const size_t elem = memory::data_type_size(ctx_.act);
  const size_t run = size_t(c_) * elem, patch = size_t(k * k) * run;
  const auto* x = static_cast<const char*>(x_nhwc);
  auto* col = static_cast<char*>(col_out);
  const int64_t n = n_, oh = oh_, ow = ow_, h = h_, w = w_;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t img = 0; img < n; ++img)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        char* row = col + size_t((img * oh + oy) * ow + ox) * patch;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * stride + ky - pad;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * stride + kx - pad;
            char* to = row + size_t(ky * k + kx) * run;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w)
              std::memset(to, 0, run);
            else
              std::memcpy(to, x + size_t((img * h + iy) * w + ix) * run, run);
          }
        }
      }
}

}  // namespace ringtrain::backend::cpu
