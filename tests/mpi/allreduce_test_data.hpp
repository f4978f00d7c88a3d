// allreduce_test_data.hpp — seeded per-rank, per-index test data with exactly known sums, and
// the checks the allreduce tests share (exact equality, bitwise equality across ranks).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rt_test {

// A small integer in [-30, 30] that depends on rank and index: any sum over <= 100 ranks
// is exact in fp32 (and in bf16 partial sums up to 256), and misplaced segments show.
inline float small_int(int rank, uint64_t i) {
  return static_cast<float>(static_cast<int64_t>((i * 7919 + uint64_t(rank) * 104729 + 17) % 61) -
                            30);
}

// A value in [-1, 1) that depends on rank and index, for rounding-sensitive tests.
inline float noise(int rank, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(rank) + 7) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<double>(x >> 40) / double(1ull << 23) - 1.0);
}

inline std::vector<float> small_int_data(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = small_int(rank, i);
  return v;
}

// Index of the first element that differs from the exact sum over world ranks, or -1.
inline int64_t first_wrong_small_int_sum(const std::vector<float>& got, int world) {
  for (size_t i = 0; i < got.size(); ++i) {
    int64_t expected = 0;
    for (int r = 0; r < world; ++r) expected += static_cast<int64_t>(small_int(r, i));
    if (got[i] != static_cast<float>(expected)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace rt_test
