// wire_format.cpp — wire format names and error bounds, bulk fp32 <-> bf16/fp16 conversions
// and the reduction kernels of the ring.
#include "ringtrain/comm/allreduce/wire_format.hpp"

#include <immintrin.h>

#include <cmath>

#include "ringtrain/core/error.hpp"

// GCC 12's AVX-512 conversion intrinsics start from _mm256_undefined_si256(), which it then
// reports as maybe-uninitialised wherever they are inlined: a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ringtrain::comm::allreduce {
namespace {

// fp16 runs of 16 (AVX-512) or 8 (F16C) through the hardware converters, which round to
// nearest even like the scalar _Float16 cast used for the tail.
#if defined(__AVX512F__)
constexpr size_t kFp16Lanes = 16;
inline void fp16_encode_block(uint16_t* out, const float* in) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm512_cvtps_ph(_mm512_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
}
inline __m512 fp16_load(const uint16_t* in) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
}
inline void fp16_decode_block(float* out, const uint16_t* in) {
  _mm512_storeu_ps(out, fp16_load(in));
}
inline void fp16_decode_add_block(float* sum, const uint16_t* in) {
  _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), fp16_load(in)));
}
#elif defined(__F16C__)
constexpr size_t kFp16Lanes = 8;
inline void fp16_encode_block(uint16_t* out, const float* in) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
}
inline __m256 fp16_load(const uint16_t* in) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
}
inline void fp16_decode_block(float* out, const uint16_t* in) {
  _mm256_storeu_ps(out, fp16_load(in));
}
inline void fp16_decode_add_block(float* sum, const uint16_t* in) {
  _mm256_storeu_ps(sum, _mm256_add_ps(_mm256_loadu_ps(sum), fp16_load(in)));
}
#else
constexpr size_t kFp16Lanes = 0;  // scalar only
inline void fp16_encode_block(uint16_t*, const float*) {}
inline void fp16_decode_block(float*, const uint16_t*) {}
inline void fp16_decode_add_block(float*, const uint16_t*) {}
#endif

// Whole blocks through the vector kernel, the tail through the scalar one.
template <typename Block, typename Scalar>
void blocked(size_t n, Block block, Scalar scalar) {
  size_t i = 0;
  if (kFp16Lanes > 0)
    for (; i + kFp16Lanes <= n; i += kFp16Lanes) block(i);
  for (; i < n; ++i) scalar(i);
}

}  // namespace

// The bf16 loops are plain integer arithmetic on restrict pointers: the compiler vectorises them.
void encode_wire(Wire wire, uint16_t* __restrict out, const float* __restrict in, size_t n) {
  if (wire == Wire::bf16) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
    return;
  }
  blocked(
      n, [&](size_t i) { fp16_encode_block(out + i, in + i); },
      [&](size_t i) { out[i] = float_to_fp16(in[i]); });
}

void decode_wire(Wire wire, float* __restrict out, const uint16_t* __restrict in, size_t n) {
  if (wire == Wire::bf16) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
    return;
  }
  blocked(
      n, [&](size_t i) { fp16_decode_block(out + i, in + i); },
      [&](size_t i) { out[i] = fp16_to_float(in[i]); });
}

void decode_add_wire(Wire wire, float* __restrict sum, const uint16_t* __restrict in, size_t n) {
  if (wire == Wire::bf16) {
    for (size_t i = 0; i < n; ++i) sum[i] += bf16_to_float(in[i]);
    return;
  }
  blocked(
      n, [&](size_t i) { fp16_decode_add_block(sum + i, in + i); },
      [&](size_t i) { sum[i] += fp16_to_float(in[i]); });
}

void round_through_wire(Wire wire, float* data, size_t n) {
  uint16_t buffer[1024];
  for (size_t done = 0; done < n; done += 1024) {
    const size_t piece = n - done < 1024 ? n - done : 1024;
    encode_wire(wire, buffer, data + done, piece);
    decode_wire(wire, data + done, buffer, piece);
  }
}

void add_floats(float* __restrict sum, const float* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) sum[i] += in[i];
}

void add_divide_floats(float* __restrict sum, const float* __restrict in, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) sum[i] = (sum[i] + in[i]) / divisor;
}

void divide_floats(float* data, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) data[i] /= divisor;
}

Wire parse_wire(const std::string& text) {
  if (text == "fp32") return Wire::fp32;
  if (text == "bf16") return Wire::bf16;
  if (text == "fp16") return Wire::fp16;
  throw InputError(str("unknown allreduce wire format '", text, "': choose fp32, bf16 or fp16"));
}

std::string to_string(Wire wire) {
  switch (wire) {
    case Wire::fp32:
      return "fp32";
    case Wire::bf16:
      return "bf16";
    case Wire::fp16:
      return "fp16";
  }
  return "unknown";
}

double wire_unit_roundoff(Wire wire) {
  switch (wire) {
    case Wire::bf16:
      return std::ldexp(1.0, -8);
    case Wire::fp16:
      return std::ldexp(1.0, -11);
    default:
      return 0;
  }
}

double wire_error_bound(Wire wire, int n, double abs_sum) {
  const double u = wire_unit_roundoff(wire);
  double bound = (std::pow(1 + u, n) - 1) * abs_sum + n * std::ldexp(1.0, -24) * abs_sum;
  if (wire == Wire::fp16) bound += n * std::ldexp(1.0, -25);
  return bound;
}

}  // namespace ringtrain::comm::allreduce
