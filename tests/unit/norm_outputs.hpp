// norm_outputs.hpp — what the batch norm tests (norm_passes, norm_relu_pool, norm_add_relu)
// compare: one forward and backward's outputs on the host, to the reference's tolerances or
// bitwise, two ranks' halves laid side by side, and where a NaN put into one channel went.
#pragma once

#include <cmath>
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

// Relative tolerances against the reference; the defaults are fp32 sums in another order.
struct NormTolerances {
  double y = 2e-5, mean = 2e-5, var = 1e-4, dx = 1e-4, dgamma = 2e-5, dbeta = 2e-5;
};

inline void expect_all_close(const NormOutputs& got, const NormOutputs& want,
                             const NormTolerances& tol = {}) {
  BOOST_TEST(got.count == want.count);
  expect_close("y", got.y, want.y, tol.y);
  expect_close("batch mean", got.mean, want.mean, tol.mean);
  expect_close("batch var", got.var, want.var, tol.var);
  expect_close("dx", got.dx, want.dx, tol.dx);
  expect_close("dgamma", got.dgamma, want.dgamma, tol.dgamma);
  expect_close("dbeta", got.dbeta, want.dbeta, tol.dbeta);
}

// A NaN or inf put into one channel must stay there: in a plain y of `channels` channels of
// `pixels` values each, the NaNs among `channel`'s values and the non-finite values elsewhere.
struct ChannelPoison {
  size_t nan_in_channel = 0, non_finite_elsewhere = 0;
};

inline ChannelPoison poison_of(const std::vector<float>& y, int64_t channels, int64_t pixels,
                               int64_t channel) {
  ChannelPoison out;
  for (size_t i = 0; i < y.size(); ++i) {
    if (int64_t(i) / pixels % channels == channel)
      out.nan_in_channel += std::isnan(y[i]);
    else
      out.non_finite_elsewhere += !std::isfinite(y[i]);
  }
  return out;
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
