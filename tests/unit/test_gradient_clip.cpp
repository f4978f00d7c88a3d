// test_gradient_clip.cpp — clipping by the global norm: a hand-computed clipped step, a step
// under the limit left alone, and the epoch's figures.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "nn_test_util.hpp"
#include "ringtrain/train/gradient_clip.hpp"

using namespace ringtrain;
using namespace rt_test;

BOOST_AUTO_TEST_SUITE(gradient_clip)

// Gradients (3, 4) and (12): global norm sqrt(9 + 16 + 144) = 13. A limit of 6.5 halves every
// value; a limit of 20 leaves them be.
BOOST_AUTO_TEST_CASE(global_norm_over_the_limit_scales_every_gradient) {
  auto be = backend::make_backend("cpu", 2);
  nn::Parameter a, b;
  a.name = "a.weight", a.shape = {2};
  b.name = "b.bias", b.shape = {1};
  a.grad = to_device(*be, {2}, {3, 4});
  b.grad = to_device(*be, {1}, {12});
  train::GradientClipper clip(6.5, {&a, &b}, *be);
  BOOST_TEST(clip.apply() == 13.0);
  BOOST_TEST(to_host(*be, a.grad) == std::vector<float>({1.5f, 2.0f}));
  BOOST_TEST(to_host(*be, b.grad) == std::vector<float>({6.0f}));
  BOOST_TEST(clip.apply() == 6.5);  // now exactly at the limit: left as it is
  BOOST_TEST(to_host(*be, b.grad) == std::vector<float>({6.0f}));
  train::ClipFigures epoch = clip.take_epoch();
  BOOST_TEST(epoch.steps == 2);
  BOOST_TEST(epoch.clipped == 1);
  BOOST_TEST(epoch.mean_norm == (13.0 + 6.5) / 2);
  BOOST_TEST(epoch.max_norm == 13.0);
  BOOST_TEST(clip.take_epoch().steps == 0);  // the next epoch starts afresh
  BOOST_TEST(clip.clipped_total() == 1);

  train::GradientClipper loose(20, {&a, &b}, *be);
  a.grad = to_device(*be, {2}, {3, 4});
  b.grad = to_device(*be, {1}, {12});
  BOOST_TEST(loose.apply() == 13.0);
  BOOST_TEST(to_host(*be, a.grad) == std::vector<float>({3.0f, 4.0f}));
  BOOST_TEST(loose.take_epoch().clipped == 0);
}

BOOST_AUTO_TEST_SUITE_END()
