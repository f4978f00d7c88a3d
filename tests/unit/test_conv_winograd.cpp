// test_conv_winograd.cpp — the cpu backend's convolutions with train.conv_algorithm = winograd:
// forward, input gradient and weight gradient of 3x3 stride-1 fp32 convolutions against the
// reference loops and oneDNN's direct kernels (Winograd rounds a little more: a stated
// tolerance), not the direct kernels' bits (so the comparisons tell the two apart), bitwise
// repeatable; every other convolution (strided, 1x1, bf16) the direct kernels' very bits;
// measure taking one of the two per convolution; the count op_choices reports; the name's parse
// and its error.
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

// y, dx and dw of one convolution (its input from a 1x1 convolution, dy = its own output).
struct Passes {
  std::vector<float> y, dx, dw;
};
Passes passes(Backend& be, const ConvCase& c, uint64_t seed) {
  const ConvSpec& s = c.spec;
  ConvInputs in = conv_inputs_as_in_training(be, c, seed);
  Tensor bias = random_tensor(be, {s.out_channels}, seed + 3);
  Tensor dbias = be.alloc({s.out_channels});
  auto op = be.make_conv(s);
  Tensor y, dx;
  Tensor dw = be.alloc({s.out_channels, s.in_channels, s.kernel, s.kernel});
  op->forward(in.x, in.w, s.bias ? &bias : nullptr, y);
  Passes out{to_host(be, y), {}, {}};
  op->backward_weights(in.x, y, dw, s.bias ? &dbias : nullptr);
  op->backward_data(y, in.w, dx);
  out.dx = to_host(be, dx);
  out.dw = to_host(be, dw);
  return out;
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

BOOST_AUTO_TEST_CASE(names_and_their_error) {
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("winograd")) == std::string("winograd"));
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("direct")) == std::string("direct"));
  BOOST_TEST(error_of([] { parse_conv_algorithm("fft"); }) ==
             "unknown convolution algorithm 'fft': choose direct, winograd or measure");
  BOOST_TEST(conv_algorithm_name(parse_conv_algorithm("measure")) == std::string("measure"));
}

BOOST_AUTO_TEST_SUITE_END()
