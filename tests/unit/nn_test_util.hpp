// nn_test_util.hpp — helpers for the backend and nn tests: seeded data, transfers, and a
// comparison that prints the max absolute and relative difference.
#pragma once

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
