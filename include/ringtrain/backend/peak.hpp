// peak.hpp — the machine's own limit for a precision: a large matmul and a wide convolution
// through the CPU backend's library, timed (benchmarks compare a model's GFLOP/s against the
// faster of the two).
#pragma once

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

// GFLOP/s of an n x n x n matmul (2 n^3 flop) in `precision` (bf16 inputs, fp32 output) on
// `threads` OpenMP threads: the median of `repeats` timed runs after one warm-up run.
// InputError for bf16 on a CPU without AVX512-BF16 or AMX.
double matmul_peak_gflops(Precision precision, int threads, int n = 2048, int repeats = 5);

// GFLOP/s of one 3x3 convolution forward, 64 -> 64 channels on 64 images of 32x32 (stride 1,
// padding 1; resnet18_cifar's first stage), in the layouts oneDNN picks. On some CPUs oneDNN's
// direct convolution runs closer to the FMA units' limit than its matmul does, so a model
// can pass the matmul's rate; the faster of the two is the ceiling a table should quote.
double conv_peak_gflops(Precision precision, int threads, int repeats = 5);

}  // namespace ringtrain::backend
