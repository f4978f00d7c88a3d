// conv_weight_gemm.cpp — a convolution's weight gradient as im2col and one oneDNN matmul.
#include "conv_weight_gemm.hpp"

#include <cstring>

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
      unfold_needed_(!(spec.kernel == 1 && spec.stride == 1 && spec.padding == 0)) {
  const int64_t o = spec.out_channels, k = spec.kernel;
  const int64_t pixels = n_ * oh_ * ow_, patch = k * k * c_;
  x_nhwc_ = memory::desc({n_, c_, h_, w_}, ctx.act, tag::nhwc);
  dy_nhwc_ = memory::desc({n_, o, oh_, ow_}, ctx.act, tag::nhwc);
  col_md_ = memory::desc({pixels, patch}, ctx.act, tag::ab);
  dw_ohwi_ = memory::desc({o, c_, k, k}, dt::f32, tag::ohwi);
  dw_plain_ = memory::desc({o, c_, k, k}, dt::f32, tag::oihw);
  dy_as_a_ = memory::desc({o, pixels}, ctx.act, memory::dims{1, o});
  // The product lands as [O, (KH, KW, I)]: dw_ohwi_'s memory.
  memory::desc product({o, patch}, dt::f32, tag::ab);
  auto pd = dnnl_try("conv weight-gradient matmul", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_as_a_, col_md_, product), ctx.engine);
  });
  matmul_ = dnnl::matmul(pd);
  if (unfold_needed_) {
    // Zeroed once: the padding's places in col are never written, so they stay zero.
    ensure(col_, Shape{pixels, patch}, col_md_);
    std::memset(col_.raw(), 0, col_md_.get_size());
  }
  ensure(dw_ohwi_scratch_, Shape{o, c_, k, k}, dw_ohwi_);
}

void ConvWeightGemm::run(const memory& x, const memory& dy, float* dw) {
  memory x_nhwc = as_layout(ctx_, x, Shape{n_, c_, h_, w_}, x_nhwc_, x_scratch_, x_reorder_);
  memory dy_nhwc =
      as_layout(ctx_, dy, Shape{n_, s_.out_channels, oh_, ow_}, dy_nhwc_, dy_scratch_, dy_reorder_);
  if (unfold_needed_) unfold(x_nhwc.get_data_handle());
  memory a(dy_as_a_, ctx_.engine, dy_nhwc.get_data_handle());
  memory b(col_md_, ctx_.engine, unfold_needed_ ? col_.raw() : x_nhwc.get_data_handle());
  memory c = mem_of(ctx_, dw_ohwi_scratch_);
  matmul_.execute(ctx_.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  dw_reorder_.run(ctx_, c, memory(dw_plain_, ctx_.engine, dw));
}

// col[(n, oy, ox), (ky, kx, c)] = x[n, oy*stride + ky - pad, ox*stride + kx - pad, c] where
// that lies inside the image; the rest is the zero col was made with.
void ConvWeightGemm::unfold(const void* x_nhwc) {
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
