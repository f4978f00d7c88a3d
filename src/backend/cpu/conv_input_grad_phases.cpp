// conv_input_grad_phases.cpp — a 3x3 stride-2 convolution's input gradient by four forward
// convolutions, one per parity of the input pixel.
#include "conv_input_grad_phases.hpp"

#include <algorithm>

namespace ringtrain::backend::cpu {
namespace {

// The filter row (column) that a phase's tap t reads: the middle one for even pixels; for odd
// ones the last (against dy's same row) and then the first (against the row below).
int64_t filter_index(int64_t parity, int64_t tap) {
  return parity == 0 ? 1 : 2 - 2 * tap;
}

// dx_md's layout over the pixels (2i + row, 2j + col): half the height and width, the row and
// column strides doubled, the start moved to the first such pixel.
memory::desc every_second_pixel(const memory::desc& dx_md, int64_t row, int64_t col) {
  dnnl_memory_desc_t d = dx_md.data;
  auto& strides = d.format_desc.blocking.strides;
  d.offset0 += row * strides[2] + col * strides[3];
  for (int k = 2; k < 4; ++k) {
    d.dims[k] /= 2;
    d.padded_dims[k] /= 2;
    strides[k] *= 2;
  }
  return memory::desc(d);
}

}  // namespace

bool ConvInputGradPhases::fits(const ConvSpec& spec, const Shape& x_shape,
                               const memory::desc& dx_md) {
  if (spec.kernel != 3 || spec.stride != 2 || spec.padding != 1) return false;
  if (x_shape.size() != 4 || x_shape[2] % 2 != 0 || x_shape[3] % 2 != 0) return false;
  const dnnl_memory_desc_t& d = dx_md.data;
  if (d.format_kind != dnnl_blocked || d.ndims != 4) return false;
  const auto& blocking = d.format_desc.blocking;
  for (int i = 0; i < blocking.inner_nblks; ++i)
    if (blocking.inner_idxs[i] >= 2) return false;
  return true;
}

ConvInputGradPhases::ConvInputGradPhases(const Context& ctx, const ConvSpec& spec,
                                         const memory::desc& dy_md, const memory::desc& dx_md)
    : ctx_(ctx), out_(spec.out_channels), in_(spec.in_channels), dy_md_(dy_md) {
  const memory::dims dy_dims = dy_md.dims();
  const memory::dims phase_out{dy_dims[0], in_, dy_dims[2], dy_dims[3]};
  for (int64_t p = 0; p < 4; ++p) {
    Phase& ph = phases_[size_t(p)];
    ph.row = p / 2;
    ph.col = p % 2;
    const int64_t ty = ph.row + 1, tx = ph.col + 1;
    const memory::dims taps{in_, out_, ty, tx};
    ph.filters = memory::desc(taps, dt::f32, memory::dims{ty * tx, in_ * ty * tx, tx, 1});
    auto d = dnnl::convolution_forward::desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, dy_md,
        memory::desc(taps, ctx.act, tag::any), memory::desc(),
        memory::desc(phase_out, ctx.act, tag::any), {1, 1}, {0, 0}, {ph.row, ph.col});
    ph.pd = dnnl_try("conv input gradient by phases",
                     [&] { return dnnl::convolution_forward::primitive_desc(d, ctx.engine); });
    ph.prim = dnnl::convolution_forward(ph.pd);
    ph.in_dx = every_second_pixel(dx_md, ph.row, ph.col);
  }
}

// The four phases' filters one after another, each [O, I, taps in y, taps in x]: w's rows and
// columns picked by filter_index, in w's own order (each filter read once, in place order); the
// reorder into the kernel's layout reads them through strides that swap O and I (Phase::filters),
// as the stride-1 path does its turned filters.
void ConvInputGradPhases::take_filters(const float* w, float* out) const {
  const int64_t filters = out_ * in_;
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < filters; ++f) {
    const float* taps = w + f * 9;
    float* even_even = out + f;                   // 1 tap
    float* even_odd = out + filters + f * 2;      // 1 x 2
    float* odd_even = out + filters * 3 + f * 2;  // 2 x 1
    float* odd_odd = out + filters * 5 + f * 4;   // 2 x 2
    even_even[0] = taps[4];
    for (int64_t t = 0; t < 2; ++t) {
      even_odd[t] = taps[3 + filter_index(1, t)];
      odd_even[t] = taps[3 * filter_index(1, t) + 1];
      for (int64_t u = 0; u < 2; ++u)
        odd_odd[t * 2 + u] = taps[3 * filter_index(1, t) + filter_index(1, u)];
    }
  }
}

void ConvInputGradPhases::run(const memory& dy, const float* w, const memory& dx,
                              CallScratch& scratch) {
  const memory src = as_layout(ctx_, dy, dy_md_, scratch.dy, dy_reorder_);
  auto* filters = static_cast<float*>(scratch.filters.at_least(9 * in_ * out_ * sizeof(float)));
  take_filters(w, filters);
  for (Phase& ph : phases_) {
    const memory wts = as_layout(ctx_, memory(ph.filters, ctx_.engine, filters),
                                 ph.pd.weights_desc(), scratch.weights, ph.filter_reorder);
    filters += ph.filters.get_size() / sizeof(float);
    const memory out(ph.pd.dst_desc(), ctx_.engine,
                     scratch.col.at_least(ph.pd.dst_desc().get_size()));
    ph.prim.execute(ctx_.stream,
                    {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, out}});
    ph.scatter.run(ctx_, out, memory(ph.in_dx, ctx_.engine, dx.get_data_handle()));
  }
}

}  // namespace ringtrain::backend::cpu
