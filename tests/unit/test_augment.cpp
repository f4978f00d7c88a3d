// test_augment.cpp — the dihedral group of a square image (training augmentation and the views
// of test-time augmentation) and the averages over views.
#include <boost/test/unit_test.hpp>
#include <set>

#include "nn_test_util.hpp"
#include "ringtrain/data/augment.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/view_average.hpp"

using namespace ringtrain;
using namespace rt_test;

BOOST_AUTO_TEST_SUITE(augment)

// The 2x2 image 1 2 / 3 4 under each element: out(y, x) = in(u', v') with (u, v) = (x, y) when
// transposed, else (y, x), then u' = 1 - u (flip_y) and v' = 1 - v (flip).
BOOST_AUTO_TEST_CASE(dihedral_views_are_the_eight_symmetries_of_the_square) {
  const std::vector<float> image = {1, 2, 3, 4};
  const std::vector<std::vector<float>> want = {
      {1, 2, 3, 4},  // identity
      {2, 1, 4, 3},  // mirror left-right
      {3, 4, 1, 2},  // mirror top-bottom
      {4, 3, 2, 1},  // rotation by 180
      {1, 3, 2, 4},  // transpose
      {2, 4, 1, 3},  // transpose and flip: rotation by 90 anticlockwise
      {3, 1, 4, 2},  // transpose and flip_y: rotation by 90 clockwise
      {4, 2, 3, 1},  // the anti-diagonal mirror
  };
  const std::vector<data::AugmentParams> views = data::tta_views(data::TtaKind::kDihedral);
  BOOST_TEST_REQUIRE(views.size() == 8u);
  for (size_t e = 0; e < views.size(); ++e) {
    std::vector<float> out(4);
    data::view_image(image.data(), 1, 2, 2, views[e], out.data());
    BOOST_TEST(out == want[e], "element " << e);
    // The loader's path (pixels, normalised) draws the same image.
    const std::vector<uint8_t> pixels = {1, 2, 3, 4};
    const data::Normaliser unit({0.0f}, {1.0f});  // pixel / 255
    data::transform_image(pixels.data(), 1, 2, 2, views[e], unit, out.data());
    for (size_t k = 0; k < 4; ++k)
      BOOST_TEST(out[k] == float(want[e][k] / 255.0), "transform_image, element " << e);
  }
  BOOST_TEST(data::tta_views(data::TtaKind::kFlip).size() == 2u);
  BOOST_TEST(data::tta_views(data::TtaKind::kNone).size() == 1u);
}

// Training draws every element, about equally, from (seed, epoch, sample) alone.
BOOST_AUTO_TEST_CASE(dihedral_augmentation_draws_every_element) {
  int counts[8] = {};
  for (int64_t id = 0; id < 8000; ++id) {
    const data::AugmentParams p = data::dihedral_params(7, 3, id);
    BOOST_TEST((p.dx == 0 && p.dy == 0));
    ++counts[int(p.flip) + 2 * int(p.flip_y) + 4 * int(p.transpose)];
    const data::AugmentParams again = data::dihedral_params(7, 3, id);
    BOOST_TEST((again.flip == p.flip && again.flip_y == p.flip_y && again.transpose == p.transpose));
  }
  for (int c : counts) BOOST_TEST((c > 900 && c < 1100), "an element drawn " << c << " times");
}

BOOST_AUTO_TEST_CASE(augment_and_tta_names) {
  BOOST_TEST(error_of([] { data::parse_augment("rotate"); }) ==
             "data.augment = rotate: expected false, true (crop and flip), crop or dihedral");
  BOOST_TEST(error_of([] { data::parse_tta("all", "--tta"); }) ==
             "--tta all: expected none, flip or dihedral");
}

// Averaged over the whole dihedral group, a model's probabilities do not change when its input
// is rotated: the 8 views of the rotated image are the 8 views of the image, in another order.
BOOST_AUTO_TEST_CASE(dihedral_average_is_invariant_to_rotating_the_input) {
  auto be = backend::make_backend("cpu", 2);
  auto model = nn::make_model("fibernet", {1, 16, 16}, 5, *be, 3);
  const std::vector<float> images = random_values(2 * 16 * 16, 5, -1, 1);
  std::vector<float> rotated(images.size());
  const data::AugmentParams rot90{0, 0, true, false, true};
  for (int i = 0; i < 2; ++i)
    data::view_image(images.data() + i * 256, 1, 16, 16, rot90, rotated.data() + i * 256);
  const std::vector<data::AugmentParams> views = data::tta_views(data::TtaKind::kDihedral);
  backend::Tensor input;
  const train::ViewProbabilities a =
      train::average_over_views(*model, *be, images, {2, 1, 16, 16}, views, input);
  const train::ViewProbabilities b =
      train::average_over_views(*model, *be, rotated, {2, 1, 16, 16}, views, input);
  BOOST_TEST_REQUIRE(a.classes.size() == 10u);
  for (size_t k = 0; k < a.classes.size(); ++k)
    BOOST_TEST(a.classes[k] == b.classes[k], boost::test_tools::tolerance(1e-6));
  // One view is the model's own softmax; its loss is -log p(label).
  const train::ViewProbabilities one =
      train::average_over_views(*model, *be, images, {2, 1, 16, 16}, {data::AugmentParams{}}, input);
  const int32_t labels[2] = {1, 4};
  const backend::LossResult r = train::loss_of_probabilities(one.classes, labels, 2, 5);
  BOOST_TEST(r.loss == -(std::log(one.classes[1]) + std::log(one.classes[9])) / 2,
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()
