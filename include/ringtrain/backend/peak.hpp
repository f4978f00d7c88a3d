// peak.hpp — the machine's own limit for a precision: a large matmul through the CPU
// backend's library, timed (benchmarks compare a model's GFLOP/s against it).
#pragma once

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

// GFLOP/s of an n x n x n matmul (2 n^3 flop) in `precision` (bf16 inputs, fp32 output) on
// `threads` OpenMP threads: the median of `repeats` timed runs after one warm-up run.
// InputError for bf16 on a CPU without AVX512-BF16 or AMX.
double matmul_peak_gflops(Precision precision, int threads, int n = 2048, int repeats = 5);

}  // namespace ringtrain::backend
