// digest.hpp — the weight digest: a 64-bit fingerprint of a tensor's fp32 values that ranks
// compare to prove they hold the same model (train/weight_check.hpp).
//
// Each 8-byte word k of the values (elements 2k and 2k+1, the last word padded with zero) is
// mixed with its position and the mixed words are summed modulo 2^64; the sum is then mixed
// with the element count. A sum is associative: the cuda backend's kernel (many threads, any
// order) gets the same bits as this host loop, and the host loop may split across threads.
// The mixer is MurmurHash3's 64-bit finaliser, bijective, so one flipped bit anywhere changes
// the digest except with probability about 2^-64. Not for security: for telling copies apart.
//
// defines: mix64, word_term, finish_digest, digest_f32, combine_digest, kDigestStart
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define RT_DIGEST_FN __host__ __device__ inline
#else
#define RT_DIGEST_FN inline
#endif

namespace ringtrain {

RT_DIGEST_FN uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// Word k's share of the sum: position k + 1, so a zero word at 0 still counts.
RT_DIGEST_FN uint64_t word_term(uint64_t word, uint64_t k) {
  return mix64(word ^ ((k + 1) * 0x9e3779b97f4a7c15ull));
}

// The digest of a tensor from its word sum and its element count (the count tells a trailing
// zero from padding).
RT_DIGEST_FN uint64_t finish_digest(uint64_t sum, uint64_t count) {
  return mix64(sum ^ mix64(count + 0x632be59bd9b4e019ull));
}

// The digest of n fp32 values in host memory (their bit patterns: -0.0 and 0.0 differ, as do
// two NaNs with different payloads). Threads share it above a few hundred thousand values.
uint64_t digest_f32(const float* values, size_t n);

// The digest of a sequence of digests, in order: start from kDigestStart, fold each in.
constexpr uint64_t kDigestStart = 0x243f6a8885a308d3ull;
RT_DIGEST_FN uint64_t combine_digest(uint64_t so_far, uint64_t next) {
  return mix64((so_far ^ next) + 0x13198a2e03707344ull);
}

}  // namespace ringtrain
