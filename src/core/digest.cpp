// digest.cpp — the host loop of the weight digest (core/digest.hpp).
#include "ringtrain/core/digest.hpp"

#include <cstring>

namespace ringtrain {
namespace {

// Below this many words one thread is faster than waking the others.
constexpr int64_t kParallelWords = int64_t(1) << 17;

}  // namespace

uint64_t digest_f32(const float* values, size_t n) {
  const int64_t words = int64_t(n / 2);
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (words >= kParallelWords)
  for (int64_t k = 0; k < words; ++k) {
    uint64_t word;
    std::memcpy(&word, values + 2 * k, sizeof word);  // little-endian: element 2k low
    sum += word_term(word, uint64_t(k));
  }
  if (n % 2) {
    uint32_t last;
    std::memcpy(&last, values + n - 1, sizeof last);
    sum += word_term(uint64_t(last), uint64_t(words));
  }
  return finish_digest(sum, uint64_t(n));
}

}  // namespace ringtrain
