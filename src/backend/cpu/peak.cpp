// peak.cpp — a large oneDNN matmul and a wide 3x3 convolution, timed: what this CPU reaches in
// fp32 or bf16.
#include "ringtrain/backend/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "dnnl_util.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::backend {

namespace {

using cpu::dt;
using cpu::memory;
using cpu::tag;

// Zeroed memory for a desc: values do not change the time, and every page is touched before
// timing.
memory zeroed(const memory::desc& md, const cpu::Context& ctx) {
  memory m(md, ctx.engine);
  std::fill_n(static_cast<char*>(m.get_data_handle()), md.get_size(), 0);
  return m;
}

// The median rate of `repeats` timed runs of `run` after one warm-up run.
template <typename Run>
double median_gflops(double flop, int repeats, Run&& run) {
  run();
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    Stopwatch watch;
    run();
    rates.push_back(flop / watch.seconds() / 1e9);
  }
  return median(rates);  // core/timer.hpp
}

dt input_type(Precision precision) {
  return precision == Precision::kBF16 ? dt::bf16 : dt::f32;
}

}  // namespace

double matmul_peak_gflops(Precision precision, int threads, int n, int repeats) {
  RT_REQUIRE_INPUT(n > 0 && repeats > 0, "matmul peak: n and repeats must be > 0");
  // The same refusal as the backend's: no bf16 peak without bf16 instructions.
  make_backend("cpu", threads, precision);
  omp_set_num_threads(threads);
  cpu::Context ctx;
  const memory::dims dims{n, n};
  memory::desc a_md(dims, input_type(precision), tag::ab), b_md(a_md), c_md(dims, dt::f32, tag::ab);
  auto pd = cpu::dnnl_try("matmul peak", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), ctx.engine);
  });
  dnnl::matmul prim(pd);
  memory a = zeroed(a_md, ctx), b = zeroed(b_md, ctx), c(c_md, ctx.engine);
  return median_gflops(2.0 * double(n) * n * n, repeats, [&] {
    prim.execute(ctx.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    ctx.stream.wait();
  });
}

double conv_peak_gflops(Precision precision, int threads, int repeats) {
  RT_REQUIRE_INPUT(repeats > 0, "convolution peak: repeats must be > 0");
  make_backend("cpu", threads, precision);
  omp_set_num_threads(threads);
  cpu::Context ctx;
  const memory::dim n = 64, c = 64, hw = 32;
  const dt in = input_type(precision);
  memory::desc x_any({n, c, hw, hw}, in, tag::any), w_any({c, c, 3, 3}, in, tag::any);
  auto d = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                           dnnl::algorithm::convolution_direct, x_any, w_any,
                                           memory::desc(), x_any, {1, 1}, {1, 1}, {1, 1});
  auto pd = cpu::dnnl_try("convolution peak",
                          [&] { return dnnl::convolution_forward::primitive_desc(d, ctx.engine); });
  dnnl::convolution_forward prim(pd);
  memory x = zeroed(pd.src_desc(), ctx), w = zeroed(pd.weights_desc(), ctx);
  memory y(pd.dst_desc(), ctx.engine);
  const double flop = 2.0 * double(n) * c * c * 9 * hw * hw;
  return median_gflops(flop, repeats, [&] {
    prim.execute(ctx.stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
    ctx.stream.wait();
  });
}

}  // namespace ringtrain::backend
