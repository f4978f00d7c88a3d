// nn_test_util.hpp — helpers for the backend and nn tests: seeded data, transfers, and a
// comparison that prints the max absolute and relative difference.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"

namespace rt_test {

using ringtrain::backend::Backend;
using ringtrain::backend::Shape;
using ringtrain::backend::Tensor;

// Uniform values in [lo, hi) from a seed; position-dependent, never all equal.
inline std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor to_device(Backend& be, const Shape& shape, const std::vector<float>& host) {
  Tensor t = be.alloc(shape);
  be.upload(host.data(), t);
  return t;
}

inline Tensor random_tensor(Backend& be, const Shape& shape, uint64_t seed, float lo = -1,
                            float hi = 1) {
  return to_device(be, shape,
                   random_values(size_t(ringtrain::backend::shape_numel(shape)), seed, lo, hi));
}

inline std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  be.download(t, v.data());
  return v;
}

// Values of an [n, c, h, w] tensor (plain order) for a max pool over window x window tiles
// without near-ties: each tile holds a random base plus 0, 1, ..., window^2 - 1 times `step`,
// shuffled, so that no rounding (bf16's included) changes which value is a tile's largest.
// Rows and columns past the last whole tile get random values.
inline std::vector<float> tiles_without_ties(const Shape& shape, int window, uint64_t seed,
                                             float step = 0.25f) {
  const int64_t n = shape[0] * shape[1], h = shape[2], w = shape[3], k = window;
  std::vector<float> v = random_values(size_t(n * h * w), seed, -2, 2);
  std::mt19937_64 rng(seed + 1);
  std::vector<int> rank(size_t(k * k));
  for (int64_t plane = 0; plane < n; ++plane)
    for (int64_t oh = 0; oh < h / k; ++oh)
      for (int64_t ow = 0; ow < w / k; ++ow) {
        for (size_t r = 0; r < rank.size(); ++r) rank[r] = int(r);
        std::shuffle(rank.begin(), rank.end(), rng);
        const float base = v[size_t((plane * h + oh * k) * w + ow * k)];
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j)
            v[size_t((plane * h + oh * k + i) * w + ow * k + j)] =
                base + step * float(rank[size_t(i * k + j)]);
      }
  return v;
}

// `host` (plain order) as a convolution writes it: through a 1x1 convolution with the identity
// filter, so in the layout the backend chose for that output (cpu: channel-blocked), holding
// exactly `host` (rounded to bf16 on a backend that stores activations in bf16).
inline Tensor as_conv_output(Backend& be, const Shape& shape, const std::vector<float>& host) {
  const int c = int(shape[1]);
  std::vector<float> identity(size_t(c * c), 0.0f);
  for (int i = 0; i < c; ++i) identity[size_t(i * c + i)] = 1.0f;
  auto conv = be.make_conv({c, c, 1, 1, 0, false, false});
  Tensor x = to_device(be, shape, host), w = to_device(be, {c, c, 1, 1}, identity), y;
  conv->forward(x, w, nullptr, y);
  return y;
}

// The same values to the bit (NaN payloads and the sign of zero included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Diff {
  double max_abs = 0;
  double rel = 0;  // max_abs / max |reference|
};

inline Diff diff(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  double scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(double(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  d.rel = scale > 0 ? d.max_abs / scale : d.max_abs;
  return d;
}

// Checks got against ref (same size) to a relative tolerance and prints the differences.
inline void expect_close(const std::string& what, const std::vector<float>& got,
                         const std::vector<float>& ref, double rel_tol) {
  BOOST_TEST_REQUIRE(got.size() == ref.size(), what << ": sizes differ");
  Diff d = diff(got, ref);
  std::printf("  %-44s max abs %.3e  rel %.3e\n", what.c_str(), d.max_abs, d.rel);
  BOOST_TEST(d.rel <= rel_tol, what << ": relative difference " << d.rel << " > " << rel_tol);
}

inline void expect_close(const std::string& what, Backend& be_got, const Tensor& got,
                         Backend& be_ref, const Tensor& ref, double rel_tol) {
  BOOST_TEST_REQUIRE((got.shape() == ref.shape()), what << ": shapes differ");
  expect_close(what, to_host(be_got, got), to_host(be_ref, ref), rel_tol);
}

// What f throws, or "(no error)".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace rt_test
