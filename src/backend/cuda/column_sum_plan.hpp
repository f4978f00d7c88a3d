// column_sum_plan.hpp — how the column-sum kernels split a row-major [rows, cols] matrix
// into blocks: host arithmetic only (no CUDA), so it is tested in every build.
//
// A bias gradient is the column sums of dy seen as [N*H*W, C] (NHWC) or [N, out] (linear).
// Pass 1: a block of kTileCols x kRowLanes threads sums one tile of kTileCols columns over
// one chunk of rows_per_chunk rows (a warp reads kTileCols adjacent columns of one row:
// coalesced), each thread every kRowLanes-th row in fp32, then the kRowLanes lanes in a
// fixed order in shared memory; its partial sums go to scratch [chunks, cols]. Pass 2 adds
// each column's chunk partials in order, in double. Nothing depends on the GPU or on
// timing, so a shape always gives the same bits; and there are enough blocks for a GPU
// whatever C is (the kernel before had one thread per column: 64 threads for C = 64).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ringtrain::backend::cuda {

struct ColumnSumPlan {
  static constexpr int kTileCols = 32;  // threadIdx.x: adjacent columns
  static constexpr int kRowLanes = 8;   // threadIdx.y: interleaved rows
  static constexpr int64_t kMaxChunks = 256;
  static constexpr int64_t kMinRowsPerLane = 32;  // rows one thread adds, at least

  int64_t tiles = 0;           // gridDim.x
  int64_t chunks = 0;          // gridDim.y, and rows of the scratch
  int64_t rows_per_chunk = 0;  // a multiple of kRowLanes
  int64_t scratch_floats = 0;  // chunks * cols
};

inline ColumnSumPlan column_sum_plan(int64_t rows, int64_t cols) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  ColumnSumPlan p;
  p.tiles = ceil_div(cols, ColumnSumPlan::kTileCols);
  const int64_t per_chunk = ceil_div(rows, ColumnSumPlan::kMaxChunks);
  p.rows_per_chunk =
      std::max<int64_t>(ColumnSumPlan::kRowLanes * ColumnSumPlan::kMinRowsPerLane,
                        ceil_div(per_chunk, ColumnSumPlan::kRowLanes) * ColumnSumPlan::kRowLanes);
  p.chunks = std::max<int64_t>(1, ceil_div(rows, p.rows_per_chunk));  // rows = 0: sums of 0
  p.scratch_floats = p.chunks * cols;
  return p;
}

}  // namespace ringtrain::backend::cuda
