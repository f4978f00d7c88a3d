// rng.hpp — the generator's random numbers: per-image seeding and draws that are the same bytes
// on every platform (no std:: distributions, whose output is implementation-defined).
#pragma once

#include <cstdint>

#include "ringtrain/core/random.hpp"

namespace ringtrain::fiber {

// splitmix64 as a pure function of x: a bijective 64-bit mixer, used to seed and to hash keys.
inline uint64_t splitmix64(uint64_t x) {
  return ringtrain::splitmix64(x);
}

// xoshiro256** seeded from a key, with uniform and approximately normal draws built from raw
// 64-bit outputs only.
class Rng {
 public:
  explicit Rng(uint64_t key) : bits_(seed_words(key)) {}
  // The stream of image `index` of split `split` (0 train, 1 val, 2 test) for `seed`: a pure
  // function of the three, so any shard or thread can render any image.
  static Rng for_image(uint64_t seed, int split, uint64_t index) {
    uint64_t key = splitmix64(seed);
    key = splitmix64(key ^ (uint64_t(split) + 1) * 0xD1B54A32D192ED03ull);
    return Rng(splitmix64(key ^ index));
  }

  uint64_t next() { return bits_.next(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n).
  int below(int n) { return int((unsigned __int128)next() * uint64_t(n) >> 64); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(double p) { return uniform() < p; }
  // Zero mean, unit variance: Irwin-Hall sum of four 16-bit uniforms from one draw (tails end
  // at 3.46 sigma; plenty for sensor noise and jitter, and exact integer arithmetic).
  float normal() {
    uint64_t r = next();
    uint32_t sum = uint32_t(r & 0xFFFF) + uint32_t((r >> 16) & 0xFFFF) +
                   uint32_t((r >> 32) & 0xFFFF) + uint32_t(r >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) per unit
    return (float(sum) - 2.0f * 65535.0f) * kScale;
  }

 private:
  // Each word is splitmix64 of the one before, starting from key.
  static Xoshiro256 seed_words(uint64_t key) {
    uint64_t words[4];
    for (uint64_t& word : words) word = key = splitmix64(key);
    return Xoshiro256(words);
  }
  Xoshiro256 bits_;
};

}  // namespace ringtrain::fiber
