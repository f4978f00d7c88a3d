// random.hpp — splitmix64 and xoshiro256**: random bits that are the same on every platform
// and standard library, for weight init, shuffles, augmentation and the fiber generator.
#pragma once

#include <cstdint>

namespace ringtrain {

// One step of splitmix64: advances state and returns a well-mixed 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna); the caller seeds its four words.
class Xoshiro256 {
 public:
  explicit Xoshiro256(const uint64_t (&words)[4]) {
    for (int i = 0; i < 4; ++i) s_[i] = words[i];
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace ringtrain
