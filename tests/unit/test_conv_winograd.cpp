// test_conv_winograd.cpp — the cpu backend's convolutions with train.conv_algorithm = winograd:
// forward, input gradient and weight gradient of 3x3 stride-1 fp32 convolutions against the
// reference loops and oneDNN's direct kernels (Winograd rounds a little more: a stated
// tolerance), not the direct kernels' bits (so the comparisons tell the two apart), bitwise
// repeatable; every other convolution (strided, 1x1, bf16) the direct kernels' very bits;
// measure taking one of the two per convolution, reporting it and taking it given beforehand;
// auto taking Winograd by its rule; the count op_choices reports; the name's parse and its
// error.
#include <boost/test/unit_test.hpp>

#include "conv_case.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

std::unique_ptr<Backend> cpu_backend(Precision precision, ConvAlgorithm algorithm) {
  return cpu_or_skip(precision, ConvWeightGrad::kOnednn, algorithm);
}

// 3x3 stride-1 convolutions Winograd takes: channels off oneDNN's blocks of 16, the stem's 3
// input channels, a non-square image, resnet18's last stage (512 channels on 4x4), a bias with
// a fused ReLU.
const ConvCase kWinograd[] = {
    {{16, 32, 3, 1, 1, false, false}, {3, 16, 8, 8}},
    {{3, 16, 3, 1, 1, false, false}, {2, 3, 12, 12}},
    {{24, 40, 3, 1, 1, false, false}, {2, 24, 9, 7}},
    {{512, 512, 3, 1, 1, false, false}, {2, 512, 4, 4}},
    {{32, 32, 3, 1, 1, true, true}, {2, 32, 6, 6}},
};
// Convolutions it does not: stride 2, 1x1, 5x5.
const ConvCase kDirect[] = {
    {{16, 32, 3, 2, 1, false, false}, {2, 16, 8, 8}},
    {{32, 48, 1, 1, 0, false, false}, {2, 32, 5, 5}},
    {{8, 16, 5, 1, 2, false, false}, {2, 8, 9, 9}},
};

// y, dx and dw of one convolution op of `be` (its input from a 1x1 convolution, dy = its own
// output).
struct Passes {
  std::vector<float> y, dx, dw;
};
Passes passes(Backend& be, ConvOp& op, const ConvCase& c, uint64_t seed) {
  const ConvSpec& s = c.spec;
  ConvInputs in = conv_inputs_as_in_training(be, c, seed);
  Tensor bias = random_tensor(be, {s.out_channels}, seed + 3);
  Tensor dbias = be.alloc({s.out_channels});
  Tensor y, dx;
  Tensor dw = be.alloc({s.out_channels, s.in_channels, s.kernel, s.kernel});
  op.forward(in.x, in.w, s.bias ? &bias : nullptr, y);
  Passes out{to_host(be, y), {}, {}};
  op.backward_weights(in.x, y, dw, s.bias ? &dbias : nullptr);
  op.backward_data(y, in.w, dx);
  out.dx = to_host(be, dx);
  out.dw = to_host(be, dw);
  return out;
}
// ... of a new op.
Passes passes(Backend& be, const ConvCase& c, uint64_t seed) {
  return passes(be, *be.make_conv(c.spec), c, seed);
}

bool same_passes(const Passes& a, const Passes& b) {
  return same_bits(a.y, b.y) && same_bits(a.dx, b.dx) && same_bits(a.dw, b.dw);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_winograd)

// Against the reference loops and the direct kernels: the F(4x4, 3x3) transforms' rounding came
// to 0.3-2.3e-6 of the largest value here (the direct kernels' own to about 1e-7); 1e-5 bounds
// it.
BOOST_AUTO_TEST_CASE(winograd_matches_the_reference_and_the_direct_kernels) {
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  auto direct = cpu_backend(Precision::kF32, ConvAlgorithm::kDirect);
  auto ref = make_backend("ref", 2);
  for (const ConvCase& c : kWinograd) {
    print_conv_case("fp32 winograd", c);
    const Passes got = passes(*winograd, c, 11), want = passes(*ref, c, 11);
    expect_close("y vs ref", got.y, want.y, 1e-5);
    expect_close("dx vs ref", got.dx, want.dx, 1e-5);
    expect_close("dw vs ref", got.dw, want.dw, 1e-5);
    const Passes dir = passes(*direct, c, 11);
    expect_close("y vs direct", got.y, dir.y, 1e-5);
    BOOST_TEST(!same_bits(got.y, dir.y));
  }
  BOOST_TEST(winograd->op_choices() ==
             "convolutions: Winograd 5, direct 0 (winograd); conv weight gradients: gemm 0, "
             "oneDNN 5 (onednn)");
  BOOST_TEST(direct->op_choices() == "conv weight gradients: gemm 0, oneDNN 5 (onednn)");
}

BOOST_AUTO_TEST_CASE(winograd_is_bitwise_repeatable) {
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  for (const ConvCase& c : kWinograd)
    BOOST_TEST(same_passes(passes(*winograd, c, 21), passes(*winograd, c, 21)));
}

// Strided, 1x1 and 5x5 convolutions, and every one in bf16, stay on the direct kernels: the
// same bits as a backend without Winograd, and counted as direct.
BOOST_AUTO_TEST_CASE(other_convolutions_keep_the_direct_kernels) {
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  auto direct = cpu_backend(Precision::kF32, ConvAlgorithm::kDirect);
  for (const ConvCase& c : kDirect)
    BOOST_TEST(same_passes(passes(*winograd, c, 31), passes(*direct, c, 31)));
  BOOST_TEST(winograd->op_choices() ==
             "convolutions: Winograd 0, direct 3 (winograd); conv weight gradients: gemm 0, "
             "oneDNN 3 (onednn)");
  auto bf16_winograd = cpu_backend(Precision::kBF16, ConvAlgorithm::kWinograd);
  auto bf16_direct = cpu_backend(Precision::kBF16, ConvAlgorithm::kDirect);
  if (!bf16_winograd) return;
  BOOST_TEST(same_passes(passes(*bf16_winograd, kWinograd[0], 32),
                         passes(*bf16_direct, kWinograd[0], 32)));
}

// measure times the forward pass both ways on a convolution's first forward and keeps the
// faster for all three passes: its bits are then those of the backend forced to that algorithm,
// and op_choices counts each convolution under the one it took.
BOOST_AUTO_TEST_CASE(measure_takes_one_algorithm_per_convolution) {
  auto measure = cpu_backend(Precision::kF32, ConvAlgorithm::kMeasure);
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  auto direct = cpu_backend(Precision::kF32, ConvAlgorithm::kDirect);
  int took_winograd = 0;
  for (const ConvCase& c : kWinograd) {
    const Passes got = passes(*measure, c, 41);
    const bool is_winograd = same_passes(got, passes(*winograd, c, 41));
    BOOST_TEST((is_winograd || same_passes(got, passes(*direct, c, 41))));
    took_winograd += is_winograd;
  }
  const int n = int(sizeof(kWinograd) / sizeof(kWinograd[0]));
  BOOST_TEST(measure->op_choices() ==
             str("convolutions: Winograd ", took_winograd, ", direct ", n - took_winograd,
                 " (measure); conv weight gradients: gemm 0, oneDNN ", n, " (onednn)"));
}

// measure's algorithm is a choice as the backward paths are (ConvOp::weight_grad_choice):
// reported once made and matching the bits; given beforehand, taken without timing (the bits of
// the algorithm named) and counted; given after a forward (a rank taking rank 0's), the plans
// built again with it; "winograd" refused where no Winograd kernel fits, "direct" taken there
// and not reported; tokens of a choice not timed (an algorithm without measure) ignored.
BOOST_AUTO_TEST_CASE(measure_reports_and_takes_its_choice) {
  auto measure = cpu_backend(Precision::kF32, ConvAlgorithm::kMeasure);
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  auto direct = cpu_backend(Precision::kF32, ConvAlgorithm::kDirect);
  const ConvCase& c = kWinograd[3];  // resnet18's last stage
  auto timed = measure->make_conv(c.spec);
  BOOST_TEST(timed->weight_grad_choice() == "");
  const bool took_winograd = same_passes(passes(*measure, *timed, c, 51), passes(*winograd, c, 51));
  BOOST_TEST(timed->weight_grad_choice() == (took_winograd ? "winograd" : "direct"));

  auto pinned = cpu_backend(Precision::kF32, ConvAlgorithm::kMeasure);
  auto to_winograd = pinned->make_conv(c.spec), to_direct = pinned->make_conv(c.spec);
  to_winograd->preset_weight_grad("winograd");
  to_direct->preset_weight_grad("direct");
  BOOST_TEST(same_passes(passes(*pinned, *to_winograd, c, 52), passes(*winograd, c, 52)));
  BOOST_TEST(same_passes(passes(*pinned, *to_direct, c, 53), passes(*direct, c, 53)));
  BOOST_TEST(to_winograd->weight_grad_choice() == "winograd");
  BOOST_TEST(pinned->op_choices() ==
             "convolutions: Winograd 1, direct 1 (measure); conv weight gradients: gemm 0, "
             "oneDNN 2 (onednn)");
  to_winograd->preset_weight_grad("direct");
  BOOST_TEST(same_passes(passes(*pinned, *to_winograd, c, 54), passes(*direct, c, 54)));
  BOOST_TEST(to_winograd->weight_grad_choice() == "direct");
  BOOST_TEST(pinned->op_choices() ==
             "convolutions: Winograd 0, direct 2 (measure); conv weight gradients: gemm 0, "
             "oneDNN 2 (onednn)");

  // With both measures, an algorithm alone pins the algorithm and leaves the paths timed.
  auto both = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure, ConvAlgorithm::kMeasure);
  auto algorithm_only = both->make_conv(c.spec);
  algorithm_only->preset_weight_grad("winograd");
  BOOST_TEST(algorithm_only->weight_grad_choice() == "");  // the paths not timed yet
  passes(*both, *algorithm_only, c, 56);
  const std::string chosen = algorithm_only->weight_grad_choice();
  BOOST_TEST(chosen.substr(chosen.rfind('+') + 1) == "winograd", chosen);
  BOOST_TEST(error_of([&] { algorithm_only->preset_weight_grad("forward+direct"); }) ==
             "conv backward: 'forward+direct' names the input gradient's path but no weight "
             "gradient's (gemm or onednn)");

  auto strided = pinned->make_conv(kDirect[0].spec);
  BOOST_TEST(error_of([&] { strided->preset_weight_grad("winograd"); }) ==
             "conv: 'winograd' for a 3x3 fp32 convolution of stride 2 and padding 1; Winograd "
             "takes 3x3 fp32 ones of stride 1 and padding 1");
  strided->preset_weight_grad("direct");
  BOOST_TEST(strided->weight_grad_choice() == "");
  auto fixed = winograd->make_conv(c.spec);
  fixed->preset_weight_grad("direct");  // conv_algorithm = winograd: nothing timed, ignored
  BOOST_TEST(same_passes(passes(*winograd, *fixed, c, 55), passes(*winograd, c, 55)));
  BOOST_TEST(error_of([&] { fixed->preset_weight_grad("onednn+fft"); }) ==
             "conv backward: unknown paths 'onednn+fft' (gemm or onednn, then +forward for the "
             "input gradient by the forward kernel, then +winograd or +direct for the algorithm)");
}

// auto's rule at its edges: Winograd from 32 channels on the narrower side, 64 4x4 output tiles
// in the batch (a partial tile counts) and 8192 tiles times that width; its bits are then those
// of the backend forced to the algorithm the rule names, and op_choices counts them. The rule
// rules on each batch shape an op sees, not only its first.
BOOST_AUTO_TEST_CASE(auto_takes_winograd_by_its_rule) {
  struct RuleCase {
    ConvCase conv;
    bool winograd;
  };
  const RuleCase cases[] = {
      {{{32, 32, 3, 1, 1, false, false}, {16, 32, 16, 16}}, true},     // 256 tiles x 32
      {{{32, 32, 3, 1, 1, false, false}, {15, 32, 16, 16}}, false},    // 240 x 32 < 8192
      {{{16, 64, 3, 1, 1, false, false}, {16, 16, 32, 32}}, false},    // 16 channels in
      {{{128, 128, 3, 1, 1, false, false}, {4, 128, 16, 16}}, true},   // 64 tiles
      {{{128, 128, 3, 1, 1, false, false}, {3, 128, 16, 16}}, false},  // 48 tiles
      {{{128, 128, 3, 1, 1, false, false}, {1, 128, 29, 29}}, true},  // 8 x 8 tiles, 29 = 7 x 4 + 1
      {{{512, 512, 3, 1, 1, false, false}, {64, 512, 4, 4}}, true},   // resnet18's last stage
      {{{512, 512, 3, 1, 1, false, false}, {16, 512, 4, 4}}, false},  // ... at 16 images
  };
  auto rule = cpu_backend(Precision::kF32, ConvAlgorithm::kAuto);
  auto winograd = cpu_backend(Precision::kF32, ConvAlgorithm::kWinograd);
  auto direct = cpu_backend(Precision::kF32, ConvAlgorithm::kDirect);
  int took_winograd = 0;
  for (const RuleCase& r : cases) {
    print_conv_case(r.winograd ? "auto, winograd" : "auto, direct", r.conv);
    const Passes got = passes(*rule, r.conv, 61);
    BOOST_TEST(same_passes(got, passes(r.winograd ? *winograd : *direct, r.conv, 61)));
    took_winograd += r.winograd;
  }
  const int n = int(sizeof(cases) / sizeof(cases[0]));
  BOOST_TEST(rule->op_choices() ==
             str("convolutions: Winograd ", took_winograd, ", direct ", n - took_winograd,
                 " (auto); conv weight gradients: gemm 0, oneDNN ", n, " (onednn)"));
  BOOST_TEST(took_winograd == 4);

  // Each batch shape by the rule, whatever the op saw first: resnet18's last stage at 64 images
  // takes Winograd, then the same op at 16 the direct kernels, and at 64 again Winograd.
  auto op = rule->make_conv(cases[6].conv.spec);
  BOOST_TEST(
      same_passes(passes(*rule, *op, cases[6].conv, 62), passes(*winograd, cases[6].conv, 62)));
  BOOST_TEST(
      same_passes(passes(*rule, *op, cases[7].conv, 63), passes(*direct, cases[7].conv, 63)));
  BOOST_TEST(
      same_passes(passes(*rule, *op, cases[6].conv, 64), passes(*winograd, cases[6].conv, 64)));
}

BOOST_AUTO_TEST_CASE(names_and_their_error) {
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("winograd")) == std::string("winograd"));
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("direct")) == std::string("direct"));
  BOOST_TEST(error_of([] { parse_conv_algorithm("fft"); }) ==
             "unknown convolution algorithm 'fft': choose direct, winograd, measure or auto");
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("measure")) == std::string("measure"));
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("auto")) == std::string("auto"));
}

BOOST_AUTO_TEST_SUITE_END()
