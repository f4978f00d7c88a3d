// wire_format.hpp — the element format ring messages travel in: fp32, or bf16/fp16 halves.
//
// Narrow formats halve the bytes on the wire; every rank still accumulates in fp32.
// Conversions round to nearest even. Error bound of one allreduce over n ranks with unit
// roundoff u (bf16: 2^-8, fp16: 2^-11): each element passes n roundings to the wire format
// (n-1 reduce-scatter hops and the final segment), so
//     |result - exact sum| <= ((1+u)^n - 1) * sum_r |x_r|     (+ n*2^-24 * sum_r |x_r| for
// the fp32 additions, + n*2^-25 absolute for fp16 subnormals). fp16 overflows beyond 65504.
// Integers up to 256 (bf16) or 2048 (fp16) in every partial sum travel exactly.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "ringtrain/core/bf16.hpp"

namespace ringtrain::comm::allreduce {

enum class Wire { fp32, bf16, fp16 };

// "fp32", "bf16" or "fp16"; anything else throws InputError naming the value and the choices.
Wire parse_wire(const std::string& text);
std::string to_string(Wire wire);
inline size_t wire_bytes(Wire wire) {
  return wire == Wire::fp32 ? 4 : 2;
}
// The unit roundoff u of the wire format (0 for fp32).
double wire_unit_roundoff(Wire wire);
// The bound above for n ranks whose inputs' absolute values sum to abs_sum.
double wire_error_bound(Wire wire, int n, double abs_sum);

using ringtrain::bf16_to_float;  // core/bf16.hpp: one definition for every bf16 user
using ringtrain::float_to_bf16;
inline uint16_t float_to_fp16(float value) {
  const _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}
inline float fp16_to_float(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, 2);
  return static_cast<float>(half);
}

// Bulk kernels (vectorised: F16C/AVX-512 for fp16, plain loops for bf16); same results as the
// scalar conversions above, element for element.
void encode_wire(Wire wire, uint16_t* out, const float* in, size_t n);  // bf16 or fp16
void decode_wire(Wire wire, float* out, const uint16_t* in, size_t n);
void decode_add_wire(Wire wire, float* sum, const uint16_t* in, size_t n);  // sum += decode(in)
// data = decode(encode(data)): what a value looks like after one trip on the wire.
void round_through_wire(Wire wire, float* data, size_t n);
void add_floats(float* sum, const float* in, size_t n);
// sum = (sum + in) / divisor: the last add of a reduction and the mean in one pass, rounded
// exactly as add_floats then divide_floats (two IEEE operations, each rounded once).
void add_divide_floats(float* sum, const float* in, size_t n, float divisor);
// data /= divisor: a true division, not a multiplication by 1/divisor (1/3 is not a float).
void divide_floats(float* data, size_t n, float divisor);

}  // namespace ringtrain::comm::allreduce
