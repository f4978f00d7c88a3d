// host_update_rules.hpp — LARS, LAMB and AdamW on host memory, and the fixed-order sums of
// squares their trust ratios and gradient clipping need (both host backends share them).
#pragma once

#include <cstdint>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend::host {

// Values per partial sum: the sums are split at these fixed boundaries whatever the thread
// count, each summed in order in fp64, and the partial sums added in order, so the result has
// the same bits on every rank, at every thread count and in every run.
constexpr int64_t kSumChunk = 1 << 14;

double sum_of_squares(const float* x, int64_t n);
// One step of spec.rule on n values (v is null for LARS).
void adaptive_update(float* w, const float* g, float* m, float* v, int64_t n,
                     const AdaptiveSpec& spec);

}  // namespace ringtrain::backend::host
