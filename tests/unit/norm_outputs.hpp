// norm_outputs.hpp — what the fused batch norm tests (norm_relu_pool, norm_add_relu) compare: one
// forward and backward's outputs on the host, to the reference's tolerances or bitwise, and two
// ranks' halves laid side by side.
#pragma once

#include <vector>

#include "nn_test_util.hpp"

namespace rt_test {

struct NormOutputs {
  std::vector<float> y, mean, var, dx, dgamma, dbeta;
  double count = 0;  // the values per channel the statistics covered
};

// The outputs of a forward and backward, downloaded.
inline NormOutputs download_norm_outputs(Backend& be, double count, const Tensor& y,
                                         const Tensor& mean, const Tensor& var, const Tensor& dx,
                                         const Tensor& dgamma, const Tensor& dbeta) {
  return {to_host(be, y),
          to_host(be, mean),
          to_host(be, var),
          to_host(be, dx),
          to_host(be, dgamma),
          to_host(be, dbeta),
          count};
}

// Against the reference: fp32 sums in another order.
inline void expect_all_close(const NormOutputs& got, const NormOutputs& want) {
  BOOST_TEST(got.count == want.count);
  expect_close("y", got.y, want.y, 2e-5);
  expect_close("batch mean", got.mean, want.mean, 2e-5);
  expect_close("batch var", got.var, want.var, 1e-4);
  expect_close("dx", got.dx, want.dx, 1e-4);
  expect_close("dgamma", got.dgamma, want.dgamma, 2e-5);
  expect_close("dbeta", got.dbeta, want.dbeta, 2e-5);
}

inline void expect_same_bits(const NormOutputs& got, const NormOutputs& want) {
  BOOST_TEST(same_bits(got.y, want.y));
  BOOST_TEST(same_bits(got.mean, want.mean));
  BOOST_TEST(same_bits(got.var, want.var));
  BOOST_TEST(same_bits(got.dx, want.dx));
  BOOST_TEST(same_bits(got.dgamma, want.dgamma));
  BOOST_TEST(same_bits(got.dbeta, want.dbeta));
}

inline std::vector<float> concat(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

inline std::vector<float> scaled(std::vector<float> v, float factor) {
  for (float& x : v) x *= factor;
  return v;
}

}  // namespace rt_test
