// test_loss_scale.cpp — LossScaler: exact scales and verdicts along sequences of clean and
// overflowing steps (growth, backoff, both clamps, static scales, restore).
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/loss_scale.hpp"

using namespace ringtrain;
using namespace ringtrain::train;

namespace {

LossScaleOptions dynamic_every(int64_t growth_interval, double init = 65536.0) {
  LossScaleOptions o;
  o.init = init;
  o.growth_interval = growth_interval;
  return o;
}

// Runs a sequence ('.' clean, 'x' not finite) and returns the scale after each step and the
// verdicts as letters ('s' step, 'o' overflow, 'n' nonfinite).
struct Trace {
  std::vector<double> scales;
  std::string verdicts;
};
Trace run(LossScaler& scaler, const std::string& steps) {
  Trace t;
  for (char c : steps) {
    ScaleVerdict v = scaler.update(c == '.');
    t.verdicts += v == ScaleVerdict::kStep ? 's' : v == ScaleVerdict::kOverflow ? 'o' : 'n';
    t.scales.push_back(scaler.scale());
  }
  return t;
}

std::string input_error(const LossScaleOptions& o) {
  try {
    LossScaler s(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loss_scale)

BOOST_AUTO_TEST_CASE(defaults_are_gradscalers) {
  LossScaler s{LossScaleOptions{}};
  BOOST_TEST(s.scale() == 65536.0);
  BOOST_TEST(s.dynamic());
  for (int i = 0; i < 1999; ++i) BOOST_TEST((s.update(true) == ScaleVerdict::kStep));
  BOOST_TEST(s.scale() == 65536.0);
  BOOST_TEST(s.state().clean_steps == 1999);
  s.update(true);  // the 2000th clean step doubles the scale for the next step
  BOOST_TEST(s.scale() == 131072.0);
  BOOST_TEST(s.state().clean_steps == 0);
}

BOOST_AUTO_TEST_CASE(overflow_halves_and_restarts_the_clean_count) {
  LossScaler s(dynamic_every(3));
  Trace t = run(s, "..x...x..x.xx...");
  BOOST_TEST(t.verdicts == "ssosssossosoosss");
  const double k = 65536.0;
  std::vector<double> expected{k,     k,     k / 2, k / 2, k / 2,  k,      k / 2,  k / 2,
                               k / 2, k / 4, k / 4, k / 8, k / 16, k / 16, k / 16, k / 8};
  BOOST_TEST(t.scales == expected, boost::test_tools::per_element());
  BOOST_TEST(s.overflow_steps() == 5);
  BOOST_TEST(s.state().clean_steps == 0);
}

BOOST_AUTO_TEST_CASE(growth_interval_one_doubles_every_clean_step) {
  LossScaler s(dynamic_every(1, 1.0));
  Trace t = run(s, "...x.");
  BOOST_TEST(t.scales == (std::vector<double>{2, 4, 8, 4, 8}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(scale_stops_at_the_ceiling) {
  LossScaler s(dynamic_every(1, kMaxLossScale / 2));
  Trace t = run(s, "....x.");
  BOOST_TEST(t.verdicts == "ssssos");
  BOOST_TEST(t.scales == (std::vector<double>{kMaxLossScale, kMaxLossScale, kMaxLossScale,
                                              kMaxLossScale, kMaxLossScale / 2, kMaxLossScale}),
             boost::test_tools::per_element());
}

// At the floor an overflow is no longer one: halving cannot make it finite, so the step goes to
// train.on_nonfinite (stop or skip) and is not counted as an overflow skip.
BOOST_AUTO_TEST_CASE(at_the_floor_a_nonfinite_step_is_not_an_overflow) {
  LossScaler s(dynamic_every(2, 4.0));
  Trace t = run(s, "xxxx.x..");
  BOOST_TEST(t.verdicts == "oonnsnss");
  BOOST_TEST(t.scales == (std::vector<double>{2, 1, 1, 1, 1, 1, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(s.overflow_steps() == 2);
}

BOOST_AUTO_TEST_CASE(static_scale_never_moves) {
  LossScaleOptions o = dynamic_every(1, 1024.0);
  o.dynamic = false;
  LossScaler s(o);
  Trace t = run(s, "..x..");
  BOOST_TEST(t.verdicts == "ssnss");
  BOOST_TEST(t.scales == (std::vector<double>(5, 1024.0)), boost::test_tools::per_element());
  BOOST_TEST(s.overflow_steps() == 0);
  s.restore(LossScaleState{8.0, 3});  // the deck's static scale wins over a checkpoint's
  BOOST_TEST(s.scale() == 1024.0);
}

BOOST_AUTO_TEST_CASE(restore_goes_on_where_the_checkpoint_stopped) {
  LossScaler whole(dynamic_every(3)), first(dynamic_every(3)), second(dynamic_every(3));
  const std::string steps = "..x....x....";
  Trace all = run(whole, steps);
  run(first, steps.substr(0, 5));
  second.restore(first.state());
  BOOST_TEST(second.state().clean_steps == 2);
  Trace rest = run(second, steps.substr(5));
  BOOST_TEST(rest.scales == std::vector<double>(all.scales.begin() + 5, all.scales.end()),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(out_of_range_options_are_input_errors) {
  BOOST_TEST(input_error(dynamic_every(1, 0.5)) ==
             "loss scale 0.5: must be from 1 to 2^24 (16777216)");
  BOOST_TEST(input_error(dynamic_every(1, 3e7)) ==
             "loss scale 3e+07: must be from 1 to 2^24 (16777216)");
  BOOST_TEST(input_error(dynamic_every(0)) ==
             "loss scale growth interval 0: must be at least 1 step");
  LossScaler s(dynamic_every(1));
  try {
    s.restore(LossScaleState{0.25, 0});
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "checkpoint loss scale 0.25 after 0 clean steps: out of range (scale 1 to 2^24, "
               "steps 0 or more)");
  }
}

BOOST_AUTO_TEST_SUITE_END()
