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

// small_int repeats every kSmallIntPeriod indices (7919 i mod 61 depends on i mod 61 alone).
constexpr uint64_t kSmallIntPeriod = 61;

// value_at(i) for i in [0, count) of a function that repeats every kSmallIntPeriod indices: one
// period computed, then copied (64 Mi values without 64 Mi divisions).
template <typename ValueAt>
std::vector<float> repeat_small_int_period(size_t count, ValueAt value_at) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count && i < kSmallIntPeriod; ++i) v[i] = value_at(i);
  for (size_t i = kSmallIntPeriod; i < count; ++i) v[i] = v[i - kSmallIntPeriod];
  return v;
}

// small_int(rank, i) for i in [0, count).
inline std::vector<float> small_int_data(int rank, size_t count) {
  return repeat_small_int_period(count, [rank](size_t i) { return small_int(rank, i); });
}

// The exact sums of small_int over ranks [0, world) for i in [0, count).
inline std::vector<float> small_int_sums(int world, size_t count) {
  return repeat_small_int_period(count, [world](size_t i) {
    float sum = 0.0f;
    for (int r = 0; r < world; ++r) sum += small_int(r, i);
    return sum;
  });
}

// Index of the first element that differs from the exact sum over world ranks, or -1.
inline int64_t first_wrong_small_int_sum(const std::vector<float>& got, int world) {
  const std::vector<float> period = small_int_sums(world, kSmallIntPeriod);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != period[i % kSmallIntPeriod]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace rt_test
