// conv_input_grad_phases.hpp — the input gradient of a 3x3 stride-2 convolution as four stride-1
// forward convolutions over dy, one per parity of the input pixel. Internal to src/backend/cpu.
#pragma once

#include <array>

#include "dnnl_util.hpp"

namespace ringtrain::backend::cpu {

// With stride 2 and padding 1, input row 2i takes the filter's middle row against dy's row i
// alone, and row 2i+1 its last row against dy's row i and its first row against row i+1; the
// columns likewise. So dx at the pixels of one parity (a, b) is a stride-1 forward convolution
// from O channels to I over dy with a 1 or 2 tap by 1 or 2 tap filter taken out of w
// (transposed), padded by one at the bottom (right) where a (b) is 1, and of dy's size. The four
// run on oneDNN's forward kernel (as fast here as its stride-1 convolutions; its backward-data
// kernel is not at stride 2: docs/TUNING.md), each into a dense scratch that a reorder writes
// into dx through a view of every second row and column. The same multiplications as
// backward data, summed in another order; bitwise repeatable (no atomics, fixed order).
class ConvInputGradPhases {
 public:
  // Whether the phases give this convolution's input gradient: 3x3, stride 2, padding 1, an
  // input of even height and width (each phase then has dy's size) in a layout that blocks
  // neither spatial dimension (the views step over its rows and columns).
  static bool fits(const ConvSpec& spec, const Shape& x_shape, const memory::desc& dx_md);

  // dy_md: the layout dy comes in (the forward's output); dx_md: the layout dx goes out in.
  ConvInputGradPhases(const Context& ctx, const ConvSpec& spec, const memory::desc& dy_md,
                      const memory::desc& dx_md);

  // dx (dx_md's layout, its memory) overwritten from dy and w, plain f32 [O, I, 3, 3]. The phase
  // filters, their reorders and the phase outputs go to `scratch` (the backend's
  // Context::call_scratch, or measure's own while it times the path).
  void run(const memory& dy, const float* w, const memory& dx, CallScratch& scratch);

 private:
  struct Phase {
    int64_t row, col;  // the parity of the input pixels it gives
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    memory::desc filters;  // f32 [I, O, taps in y, taps in x] read from [O, I, ...] memory
    memory::desc in_dx;    // dx's layout over the pixels (2i + row, 2j + col)
    CachedReorder filter_reorder, scatter;
  };

  void take_filters(const float* w, float* out) const;

  const Context& ctx_;
  int64_t out_, in_;  // O, I
  memory::desc dy_md_;
  std::array<Phase, 4> phases_;
  CachedReorder dy_reorder_;
};

}  // namespace ringtrain::backend::cpu
