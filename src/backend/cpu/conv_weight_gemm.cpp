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
    x_md_ = memory::desc({n_, c_, h_, w_}, ctx.act, tag::nchw);
    col_md_ = memory::desc({patch, pixels}, ctx.act, tag::ab);
    a_md_ = col_md_;
    b_md_ = memory::desc({pixels, o}, ctx.act, tag::ab);
    product_md_ = memory::desc({patch, o}, dt::f32, tag::ab);
    product_as_w_ = memory::desc({o, c_, k, k}, dt::f32, memory::dims{1, k * k * o, k * o, o});
  } else {
    x_md_ = memory::desc({n_, c_, h_, w_}, ctx.act, tag::nhwc);
    col_md_ = memory::desc({pixels, patch}, ctx.act, tag::ab);
    a_md_ = memory::desc({o, pixels}, ctx.act, memory::dims{1, o});  // dy^T
    b_md_ = col_md_;
    product_md_ = memory::desc({o, patch}, dt::f32, tag::ab);
    product_as_w_ = memory::desc({o, c_, k, k}, dt::f32, tag::ohwi);
  }
  auto pd = dnnl_try("conv weight-gradient matmul", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md_, b_md_, product_md_), ctx.engine);
  });
  matmul_ = dnnl::matmul(pd);
  // Zeroed once: the padding's places in col are never written, so they stay zero.
  ensure(col_, planes_ ? Shape{patch, pixels} : Shape{pixels, patch}, col_md_);
  std::memset(col_.raw(), 0, col_md_.get_size());
  ensure(product_, planes_ ? Shape{patch, o} : Shape{o, patch}, product_md_);
}

void ConvWeightGemm::run(const memory& x, const memory& dy, float* dw) {
  memory x_unfolded = as_layout(ctx_, x, Shape{n_, c_, h_, w_}, x_md_, x_scratch_, x_reorder_);
  memory dy_nhwc =
      as_layout(ctx_, dy, Shape{n_, s_.out_channels, oh_, ow_}, dy_nhwc_, dy_scratch_, dy_reorder_);
  const memory col = mem_of(ctx_, col_);
  memory dy_operand(planes_ ? b_md_ : a_md_, ctx_.engine, dy_nhwc.get_data_handle());
  if (!planes_) {
    unfold_patches(x_unfolded.get_data_handle());
  } else if (ctx_.act == dt::bf16) {
    unfold_planes(static_cast<const uint16_t*>(x_unfolded.get_data_handle()),
                  static_cast<uint16_t*>(col_.raw()));
  } else {
    unfold_planes(static_cast<const uint32_t*>(x_unfolded.get_data_handle()),
                  static_cast<uint32_t*>(col_.raw()));
  }
  matmul_.execute(ctx_.stream, {{DNNL_ARG_SRC, planes_ ? col : dy_operand},
                                {DNNL_ARG_WEIGHTS, planes_ ? dy_operand : col},
                                {DNNL_ARG_DST, mem_of(ctx_, product_)}});
  dw_reorder_.run(ctx_, memory(product_as_w_, ctx_.engine, product_.raw()),
                  memory(dw_plain_, ctx_.engine, dw));
}

// col[(i, ky, kx), (n, oy, ox)] = x[n, i, oy + ky - pad, ox + kx - pad] where that lies
// inside the image, else 0. At stride 1 and the input's size, tap (ky, kx) reads the image
// plane shifted by (ky - pad) rows and (kx - pad) columns: one flat pass per (row, image)
// copies the plane, with the places the shift moves outside the image masked to zero (small
// images, 4x4, would otherwise copy a few values per call). The pass stops where the shifted
// read would leave x's memory (the first and last planes; more of them for 1-row images),
// places the mask zeroes anyway. U is the element's bits (uint16_t for bf16, uint32_t for
// fp32): copied and masked, never computed on.
template <typename U>
void ConvWeightGemm::unfold_planes(const U* x, U* col) const {
  const int64_t k = s_.kernel, pad = s_.padding;
  const int64_t n = n_, c = c_, h = h_, w = w_, hw = h_ * w_, pixels = n_ * hw;
  // masks[(ky, kx)][j]: all ones where pixel j moved by the tap lies inside the image.
  std::vector<U> masks(size_t(k * k * hw));
  for (int64_t tap = 0; tap < k * k; ++tap)
    for (int64_t j = 0; j < hw; ++j) {
      const int64_t iy = j / w + tap / k - pad, ix = j % w + tap % k - pad;
      masks[size_t(tap * hw + j)] = iy >= 0 && iy < h && ix >= 0 && ix < w ? U(~U(0)) : U(0);
    }
  const U* mask_data = masks.data();
  const int64_t x_size = n * c * hw;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < c * k * k; ++row) {
    const int64_t ch = row / (k * k), tap = row % (k * k);
    const int64_t shift = (tap / k - pad) * w + (tap % k - pad);
    const U* mask = mask_data + tap * hw;
    for (int64_t img = 0; img < n; ++img) {
      const int64_t from = (img * c + ch) * hw + shift;  // x's index for pixel 0
      const int64_t lo = std::max<int64_t>(0, -from), hi = std::min<int64_t>(hw, x_size - from);
      U* out = col + row * pixels + img * hw;
#pragma omp simd
      for (int64_t j = lo; j < hi; ++j) out[j] = x[from + j] & mask[j];
    }
  }
}

// col[(n, oy, ox), (ky, kx, c)] = x[n, oy*stride + ky - pad, ox*stride + kx - pad, c] where
// that lies inside the image; the rest is the zero col was made with.
void ConvWeightGemm::unfold_patches(const void* x_nhwc) {
  const int64_t k = s_.kernel, stride = s_.stride, pad = s_.padding;
  const size_t elem = memory::data_type_size(ctx_.act);
  const size_t run = size_t(c_) * elem, patch = size_t(k * k) * run;
  const auto* x = static_cast<const char*>(x_nhwc);
  auto* col = static_cast<char*>(col_.raw());
  const int64_t n = n_, oh = oh_, ow = ow_, h = h_, w = w_;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t img = 0; img < n; ++img)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        char* row = col + size_t((img * oh + oy) * ow + ox) * patch;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * stride + ky - pad;
          if (iy < 0 || iy >= h) continue;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * stride + kx - pad;
            if (ix < 0 || ix >= w) continue;
            std::memcpy(row + size_t(ky * k + kx) * run, x + size_t((img * h + iy) * w + ix) * run,
                        run);
          }
        }
      }
}

}  // namespace ringtrain::backend::cpu
