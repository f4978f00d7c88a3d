// peak.cpp — a large oneDNN matmul, timed: what this CPU reaches in fp32 or bf16.
#include "ringtrain/backend/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "dnnl_util.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::backend {

double matmul_peak_gflops(Precision precision, int threads, int n, int repeats) {
  RT_REQUIRE_INPUT(n > 0 && repeats > 0, "matmul peak: n and repeats must be > 0");
  // The same refusal as the backend's: no bf16 peak without bf16 instructions.
  make_backend("cpu", threads, precision);
  omp_set_num_threads(threads);
  using cpu::dt;
  using cpu::memory;
  using cpu::tag;
  cpu::Context ctx;
  const dt in = precision == Precision::kBF16 ? dt::bf16 : dt::f32;
  const memory::dims dims{n, n};
  memory::desc a_md(dims, in, tag::ab), b_md(dims, in, tag::ab), c_md(dims, dt::f32, tag::ab);
  auto pd = cpu::dnnl_try("matmul peak", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), ctx.engine);
  });
  dnnl::matmul prim(pd);
  memory a(a_md, ctx.engine), b(b_md, ctx.engine), c(c_md, ctx.engine);
  // Values do not change the time; zeroed memory keeps every page touched before timing.
  std::fill_n(static_cast<char*>(a.get_data_handle()), a_md.get_size(), 0);
  std::fill_n(static_cast<char*>(b.get_data_handle()), b_md.get_size(), 0);
  auto run = [&] {
    prim.execute(ctx.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    ctx.stream.wait();
  };
  run();
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    Stopwatch watch;
    run();
    rates.push_back(2.0 * double(n) * n * n / watch.seconds() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace ringtrain::backend
