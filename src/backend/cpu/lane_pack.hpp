// lane_pack.hpp — N channel lanes of fp32 or bf16 activations as one GCC vector, for our own
// loops over oneDNN's channel-blocked layouts. Internal to src/backend/cpu.
//
// A loop written as `#pragma omp simd` over 16 lanes is left scalar by GCC 12 when it peels
// for alignment or cannot if-convert a select; vector types make one instruction per pack with
// no intrinsics. A pack is as wide as the build's vectors (channel_runs.hpp's with_pack: 16
// lanes with AVX-512, 8 with AVX2, the bundle's x86-64-v3).
#pragma once

#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "../fusion_switch.hpp"

namespace ringtrain::backend::cpu {

// Our loops write an output of kStreamBytes or more with non-temporal stores (LanePack::stream)
// where it starts on a 64-byte boundary, unless RINGTRAIN_STREAM_STORES=off: twice the largest
// per-core L2 of the machines measured, so that an output its consumer could still find in
// L2 is stored as usual (docs/TUNING.md, "Streaming stores").
constexpr int64_t kStreamBytes = int64_t(4) << 20;

// The passes that streamed their output, process-wide (the tests' witness that they did).
inline std::atomic<uint64_t>& streamed_outputs() {
  static std::atomic<uint64_t> count{0};
  return count;
}

// Whether a pass writes y (bytes long) with LanePack::stream; counted where it does. The switch
// is read only for outputs that large.
inline bool streams_output(const void* y, int64_t bytes) {
  const bool stream = bytes >= kStreamBytes && reinterpret_cast<uintptr_t>(y) % 64 == 0 &&
                      !env_switch("RINGTRAIN_STREAM_STORES", "on", "off");
  if (stream) streamed_outputs() += 1;
  return stream;
}

template <int N>
struct LanePack {
  // to[l] += v[l] for each lane: a pack's fp32 sums into fp64 ones, lane by lane.
  template <typename V>
  static void add_lanes(double* to, const V& v) {
    for (int l = 0; l < N; ++l) to[l] += v[l];
  }

  // typedef, not using: GCC 12 drops a vector_size that depends on N from an alias template.
  typedef float F __attribute__((vector_size(4 * N)));     // values
  typedef int32_t I __attribute__((vector_size(4 * N)));   // masks (-1 or 0) and small ints
  typedef uint32_t U __attribute__((vector_size(4 * N)));  // fp32 bits
  typedef uint16_t H __attribute__((vector_size(2 * N)));  // bf16 bits
  typedef uint8_t B __attribute__((vector_size(N)));       // bytes

  static I splat_int(int32_t v) { return I{} + v; }
  // Lanes holding a NaN or an inf (v - v is NaN there, 0 elsewhere).
  static I non_finite(F v) { return v - v != 0.0f; }

  static F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static F load(const uint16_t* p) {
    H h;
    std::memcpy(&h, p, sizeof h);
    return reinterpret_cast_bits(widen<U>(h) << 16);
  }
  static I load_bytes(const uint8_t* p) {
    B b;
    std::memcpy(&b, p, sizeof b);
    return widen<I>(b);
  }

  static void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
  // Rounded to nearest even; NaN stays a quiet NaN (core/bf16.hpp's float_to_bf16, per lane).
  static void store(uint16_t* p, F v) {
    const H h = narrow<H>(bf16_bits(v));
    std::memcpy(p, &h, sizeof h);
  }
  // v already as T stores it (stored(), stored_finite(), or a NaN that arithmetic made: its
  // quiet bit is in the high half): bf16 keeps the high half, with no rounding to do.
  static void store_as_stored(float* p, F v) { store(p, v); }
  static void store_as_stored(uint16_t* p, F v) {
    U bits;
    std::memcpy(&bits, &v, sizeof bits);
    const H h = narrow<H>(bits >> 16);
    std::memcpy(p, &h, sizeof h);
  }
  // A non-temporal store, past the caches, p aligned to the pack: for an output far larger than
  // the caches, whose lines a plain store first reads from memory (docs/TUNING.md, "Streaming
  // stores"). The caller fences (stream_fence) before another thread reads what it wrote.
  // By N, not by sizeof v: GCC 12 took `sizeof v == 64` for false in this template.
  // (16 lanes only in a build for AVX-512: channel_runs.hpp's kWidestPack.)
  static void stream(float* p, F v) {
    if constexpr (N == 16) return _mm512_stream_ps(p, reinterpret_cast<const __m512&>(v));
    if constexpr (N == 8) return _mm256_stream_ps(p, reinterpret_cast<const __m256&>(v));
    store(p, v);
  }
  static void stream(uint16_t* p, F v) { stream_half(p, narrow<H>(bf16_bits(v))); }
  // store_as_stored's non-temporal twin.
  static void stream_as_stored(float* p, F v) { stream(p, v); }
  static void stream_as_stored(uint16_t* p, F v) {
    U bits;
    std::memcpy(&bits, &v, sizeof bits);
    stream_half(p, narrow<H>(bits >> 16));
  }
  static void stream_fence() { _mm_sfence(); }
  // store or stream (store_as_stored or stream_as_stored) as a loop's kStream chose: the loops
  // that may stream their output write through these.
  template <bool kStream, typename T>
  static void write(T* p, F v) {
    if constexpr (kStream)
      stream(p, v);
    else
      store(p, v);
  }
  template <bool kStream, typename T>
  static void write_as_stored(T* p, F v) {
    if constexpr (kStream)
      stream_as_stored(p, v);
    else
      store_as_stored(p, v);
  }

  static void store_bytes(uint8_t* p, I v) {
    const B b = narrow<B>(v);
    std::memcpy(p, &b, sizeof b);
  }

  // v where mask is set (-1), +0 where it is not (0), by its bits. Written `mask ? v : F{}`
  // with v just loaded, GCC folds the select into a zero-masking load, which Zen 5 runs far
  // slower than a load and a logical and: a batch norm's masked backward pass took 1.4 x as long
  // (docs/TUNING.md).
  static F keep(F v, I mask) {
    U bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits &= (U)mask;  // a vector cast keeps the bits
    return reinterpret_cast_bits(bits);
  }

  // v as storing it in T keeps it: itself for fp32, rounded to bf16 for bf16.
  static F stored(F v, const float*) { return v; }
  static F stored(F v, const uint16_t*) { return reinterpret_cast_bits(bf16_bits(v) << 16); }
  // The same for finite v, in fewer instructions. A NaN may come out as an inf (a payload only in
  // the low 16 bits, dropped) or a -0 (one carried into the sign); the default NaN stays NaN. For
  // callers that handle NaN apart.
  static F stored_finite(F v, const float*) { return v; }
  static F stored_finite(F v, const uint16_t*) {
    U bits;
    std::memcpy(&bits, &v, sizeof bits);
    return reinterpret_cast_bits((bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u);
  }

 private:
  static void stream_half(uint16_t* p, H h) {
    if constexpr (N == 16) {
      __m256i bits;
      std::memcpy(&bits, &h, sizeof h);
      return _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
    }
    if constexpr (N == 8) {
      __m128i bits;
      std::memcpy(&bits, &h, sizeof h);
      return _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
    }
    std::memcpy(p, &h, sizeof h);
  }

  // Lane by lane: GCC 12's __builtin_convertvector rejects vector types that depend on a
  // template parameter; at -O3 these loops become one widening or narrowing move.
  template <typename To, typename From>
  static To widen(From v) {
    To out;
    for (int l = 0; l < N; ++l) out[l] = v[l];
    return out;
  }
  template <typename To, typename From>
  static To narrow(From v) {
    return widen<To>(v);
  }
  static F reinterpret_cast_bits(U u) {
    F f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static U bf16_bits(F v) {
    U bits;
    std::memcpy(&bits, &v, sizeof bits);
    const U rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const U quiet_nan = (bits >> 16) | 0x40u;
    return (bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  }
};

}  // namespace ringtrain::backend::cpu
