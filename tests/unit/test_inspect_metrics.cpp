// test_inspect_metrics.cpp — F1, AUROC, pass/fail rates and the false-accept threshold on
// hand-counted examples, and the model file's card (written, read back, a version-1 file).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/io/model_file.hpp"
#include "ringtrain/train/inspect_metrics.hpp"

using namespace ringtrain;
using namespace ringtrain::train;

BOOST_AUTO_TEST_SUITE(inspect_metrics)

BOOST_AUTO_TEST_CASE(f1_counts_true_and_false_positives) {
  // predicted at 0.5: 1 1 0 0 1; truth 1 0 1 0 1 -> tp 2, fp 1, fn 1: F1 = 4 / 6.
  BOOST_TEST(f1_score({0.9f, 0.6f, 0.4f, 0.1f, 0.5f}, {1, 0, 1, 0, 1}) == 4.0 / 6.0,
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(f1_score({0.1f, 0.2f}, {0, 0}) == 0.0);
}

BOOST_AUTO_TEST_CASE(auroc_is_the_probability_a_positive_outranks_a_negative) {
  BOOST_TEST(auroc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == 0.75);
  BOOST_TEST(auroc({0.9f, 0.8f, 0.1f}, {1, 1, 0}) == 1.0);
  // A tie between a positive and a negative counts half: pairs (0.5+, 0.5-) 0.5, (0.5+, 0.2-) 1.
  BOOST_TEST(auroc({0.5f, 0.5f, 0.2f}, {1, 0, 0}) == 0.75);
  BOOST_TEST(std::isnan(auroc({0.3f, 0.6f}, {1, 1})));
}

BOOST_AUTO_TEST_CASE(pass_figures_count_false_accepts_among_failing_images) {
  // truth: 3 failing (0), 2 passing (1); at 0.5: fail 0.7 accepted, pass 0.2 rejected.
  const PassFigures f = pass_figures({0.7f, 0.1f, 0.3f, 0.9f, 0.2f}, {0, 0, 0, 1, 1}, 0.5f);
  BOOST_TEST(f.failing == 3);
  BOOST_TEST(f.passing == 2);
  BOOST_TEST(f.false_accept == 1.0 / 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(f.false_reject == 0.5);
  BOOST_TEST(f.accuracy == 3.0 / 5.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(threshold_meets_the_false_accept_target_and_rejects_least) {
  // 10 failing images at P(pass) 0.05 .. 0.95 step 0.1, 4 passing ones.
  std::vector<float> p;
  std::vector<uint8_t> truth;
  for (int i = 0; i < 10; ++i) p.push_back(0.05f + 0.1f * float(i)), truth.push_back(0);
  for (float q : {0.97f, 0.9f, 0.8f, 0.5f}) p.push_back(q), truth.push_back(1);
  // Target 0.1: one failing image (0.95) may pass; the next (0.85) must not.
  const float t = choose_pass_threshold(p, truth, 0.1);
  BOOST_TEST(t > p[8]);
  BOOST_TEST(t <= p[9]);
  const PassFigures f = pass_figures(p, truth, t);
  BOOST_TEST(f.false_accept == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(f.false_reject == 0.5);  // 0.8 and 0.5 rejected, the least any valid threshold does
  // Target 0: above every failing image.
  const float strict = choose_pass_threshold(p, truth, 0.0);
  BOOST_TEST(pass_figures(p, truth, strict).false_accept == 0.0);
  BOOST_TEST(pass_figures(p, truth, strict).false_reject == 0.75);
  // Ties: two failing images at 0.9 and target 0.1 of 2: none may pass, so neither tie does.
  BOOST_TEST(pass_figures({0.9f, 0.9f, 0.95f}, {0, 0, 1},
                          choose_pass_threshold({0.9f, 0.9f, 0.95f}, {0, 0, 1}, 0.1))
                 .false_accept == 0.0);
  BOOST_TEST(choose_pass_threshold({0.3f}, {1}, 0.01) == 0.5f);  // nothing fails: the default
}

BOOST_AUTO_TEST_CASE(model_card_round_trip_and_version_1_message) {
  io::ModelCard card;
  card.model = "fibernet";
  card.heads = "inspect";
  card.input_shape = {1, 64, 64};
  card.mean = {0.5f};
  card.std = {0.25f};
  card.class_names = {"clean", "scratch"};
  card.defect_names = {"clean", "scratch", "crack"};
  card.zone_names = {"A", "B", "C", "D"};
  card.pass_threshold = 0.83f;
  h5::File file = h5::File::create_in_memory("card.h5");
  file.root().set_attr("format", io::kCheckpointFormat);
  file.root().set_attr("format_version", io::kCheckpointVersion);
  io::write_model_card(file.root(), card);
  const io::ModelCard back = io::read_model_card(file.root());
  BOOST_TEST(back.heads == "inspect");
  BOOST_TEST(back.input_shape == card.input_shape);
  BOOST_TEST(back.defect_names == card.defect_names);
  BOOST_TEST(back.pass_threshold == 0.83f);

  h5::File old = h5::File::create_in_memory("old.ckpt.h5");
  old.root().set_attr("format", io::kCheckpointFormat);
  old.root().set_attr("format_version", int32_t(1));
  old.root().set_attr("model", std::string("fibernet"));
  try {
    io::read_model_card(old.root());
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "old.ckpt.h5: checkpoint format_version 1 lacks what inference needs (heads "
               "input_shape mean std class_names); " +
                   std::string(io::kResaveHint));
  }
}

BOOST_AUTO_TEST_SUITE_END()
