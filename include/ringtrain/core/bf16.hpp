// bf16.hpp — fp32 <-> bfloat16 (the upper 16 bits of an fp32), rounding to nearest even.
//
// One definition for every module that stores bf16: the bf16 wire format of the allreduce,
// the CPU backend's bf16 activations, the bf16 reference backend. NaN stays a (quiet) NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace ringtrain {

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t half) {
  const uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// value rounded to the nearest bf16, kept in an fp32.
inline float round_to_bf16(float value) {
  return bf16_to_float(float_to_bf16(value));
}

}  // namespace ringtrain
