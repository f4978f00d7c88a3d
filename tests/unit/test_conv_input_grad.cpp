// test_conv_input_grad.cpp — the cpu backend's convolution input gradient by its forward kernel
// (dy convolved with the flipped, transposed filter; a choice of train.conv_weight_grad =
// measure) against oneDNN's backward-data kernel and the reference loops, in fp32 and bf16, on
// tensors in oneDNN's blocked layouts; bitwise repeatable; measure deciding it once, only where
// it applies (stride 1 and an output of the input's size; 3x3 at stride 2 and padding 1 on an
// input of even size, by four convolutions, one per parity of the input pixel); presets and
// their errors.
#include <boost/test/unit_test.hpp>

#include "conv_case.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// Convolutions the forward kernel can take: 3x3 padded (channels off oneDNN's blocks of 16, and
// 64 on a 4x4 image as in resnet18's last stage), 1x1, a 5x5 on odd sizes, a 1-row image, and
// one with a bias and a fused ReLU (its dy is the ReLU's input gradient: the kernel ignores both);
// then 3x3 at stride 2 (by phases): channels off the blocks, a non-square image, resnet18's
// 256->512 on 8x8, a 2x2 input (each phase one pixel), and a bias with a fused ReLU.
const ConvCase kCases[] = {
    {{8, 16, 3, 1, 1, false, false}, {3, 8, 12, 12}},
    {{16, 32, 3, 1, 1, false, false}, {2, 16, 9, 9}},
    {{32, 48, 1, 1, 0, false, false}, {2, 32, 5, 5}},
    {{5, 7, 5, 1, 2, false, false}, {2, 5, 11, 7}},
    {{64, 64, 3, 1, 1, false, false}, {2, 64, 4, 4}},
    {{4, 4, 3, 1, 1, false, false}, {3, 4, 1, 5}},
    {{6, 12, 3, 1, 1, true, true}, {2, 6, 7, 7}},
    {{8, 16, 3, 2, 1, false, false}, {3, 8, 10, 10}},
    {{16, 32, 3, 2, 1, false, false}, {2, 16, 8, 6}},
    {{256, 512, 3, 2, 1, false, false}, {2, 256, 8, 8}},
    {{5, 7, 3, 2, 1, false, false}, {2, 5, 2, 2}},
    {{6, 12, 3, 2, 1, true, true}, {2, 6, 6, 6}},
};
constexpr int kCaseCount = int(sizeof(kCases) / sizeof(kCases[0]));

// dx of one convolution whose input comes out of a 1x1 convolution before it and whose dy is
// its own output: both in the layouts oneDNN chose, as in training. preset, when given, goes to
// the op before its first pass; *op_out keeps the op for the caller's questions.
std::vector<float> input_gradient(Backend& be, const ConvCase& c, uint64_t seed,
                                  const std::string& preset = "",
                                  std::unique_ptr<ConvOp>* op_out = nullptr) {
  const ConvSpec& s = c.spec;
  ConvInputs in = conv_inputs_as_in_training(be, c, seed);
  Tensor bias = random_tensor(be, {s.out_channels}, seed + 3);
  auto op = be.make_conv(s);
  if (!preset.empty()) op->preset_weight_grad(preset);
  Tensor y, dx;
  op->forward(in.x, in.w, s.bias ? &bias : nullptr, y);
  op->backward_data(y, in.w, dx);
  std::vector<float> out = to_host(be, dx);
  if (op_out) *op_out = std::move(op);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_input_grad)

// fp32: the forward kernel's dx against oneDNN's backward-data kernel and the reference loops
// (a few ulps of different summation orders), and not the same bits as oneDNN's on a 5x5 (so the
// comparisons below tell the two paths apart).
BOOST_AUTO_TEST_CASE(forward_kernel_matches_onednn_and_the_reference_in_fp32) {
  auto measure = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  auto ref = make_backend("ref", 2);
  for (const ConvCase& c : kCases) {
    print_conv_case("fp32", c);
    const std::vector<float> got = input_gradient(*measure, c, 11, "onednn+forward");
    expect_close("forward kernel vs oneDNN", got, input_gradient(*onednn, c, 11), 2e-5);
    expect_close("forward kernel vs ref", got, input_gradient(*ref, c, 11), 2e-5);
  }
  BOOST_TEST(!same_bits(input_gradient(*measure, kCases[3], 12, "onednn+forward"),
                        input_gradient(*onednn, kCases[3], 12)));
  BOOST_TEST(!same_bits(input_gradient(*measure, kCases[9], 12, "onednn+forward"),
                        input_gradient(*onednn, kCases[9], 12)));
  // Each preset names the weight gradient's path too (oneDNN's): every case and the two above.
  const std::string n = std::to_string(kCaseCount + 2);
  BOOST_TEST(measure->op_choices() == "conv weight gradients: gemm 0, oneDNN " + n +
                                          " (measure); input gradients: forward kernel " + n +
                                          ", oneDNN 0");
}

// bf16: both paths multiply the same bf16 values (the filter rounded once, the flip moves
// values only) and accumulate in fp32; dx is rounded to bf16, so a sum on either side of a
// rounding boundary may land one bf16 step apart.
BOOST_AUTO_TEST_CASE(forward_kernel_matches_onednn_in_bf16) {
  auto measure = cpu_or_skip(Precision::kBF16, ConvWeightGrad::kMeasure);
  auto onednn = cpu_or_skip(Precision::kBF16, ConvWeightGrad::kOnednn);
  if (!measure) return;
  for (const ConvCase& c : kCases) {
    print_conv_case("bf16", c);
    expect_close("forward kernel vs oneDNN", input_gradient(*measure, c, 21, "onednn+forward"),
                 input_gradient(*onednn, c, 21), 4e-3);
  }
}

// The same inputs twice through the forward kernel: the same bits.
BOOST_AUTO_TEST_CASE(forward_kernel_is_bitwise_repeatable) {
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    auto be = cpu_or_skip(precision, ConvWeightGrad::kMeasure);
    if (!be) continue;
    for (const ConvCase& c : kCases)
      BOOST_TEST(same_bits(input_gradient(*be, c, 31, "onednn+forward"),
                           input_gradient(*be, c, 31, "onednn+forward")));
  }
}

// measure times both paths at the first backward pass and keeps the faster; its choice then
// gives that path's bits. A strided convolution has oneDNN's kernel alone: nothing timed.
BOOST_AUTO_TEST_CASE(measure_decides_once_where_the_forward_kernel_applies) {
  auto measure = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  const ConvCase& c = kCases[3];
  std::unique_ptr<ConvOp> op;
  const std::vector<float> got = input_gradient(*measure, c, 41, "", &op);
  const ConvOp::WeightGradTimes t = op->weight_grad_times();
  BOOST_TEST(t.data_onednn_ms > 0.0);
  BOOST_TEST(t.data_forward_ms > 0.0);
  const bool forward = t.data_forward_ms < t.data_onednn_ms;
  // No weight-gradient pass ran: the choice waits for it, the input gradient's path holds.
  BOOST_TEST(op->weight_grad_choice() == "");
  const std::vector<float> by_path =
      forward ? input_gradient(*measure, c, 41, "onednn+forward") : input_gradient(*onednn, c, 41);
  BOOST_TEST(same_bits(got, by_path));

  // 3x3 at stride 2 on an odd input: the phases do not fit, oneDNN's kernel alone, untimed.
  const ConvCase strided{{8, 16, 3, 2, 1, false, false}, {2, 8, 9, 9}};
  std::unique_ptr<ConvOp> strided_op;
  input_gradient(*measure, strided, 42, "", &strided_op);
  BOOST_TEST(strided_op->weight_grad_times().data_onednn_ms == 0.0);
  BOOST_TEST(strided_op->weight_grad_times().data_forward_ms == 0.0);
  // Only input gradients ran (the strided one alone, on a backend of its own): op_choices
  // says so, whichever way the timing above went.
  auto only_data = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  input_gradient(*only_data, strided, 43);
  BOOST_TEST(only_data->op_choices() ==
             "conv weight gradients: gemm 0, oneDNN 0 (measure); input gradients: forward kernel "
             "0, oneDNN 1");
  // The timed op, the strided one (oneDNN's, untimed) and, where the forward kernel won, the
  // preset op beside them (its preset names oneDNN's weight gradient).
  BOOST_TEST(measure->op_choices() ==
             (forward ? "conv weight gradients: gemm 0, oneDNN 1 (measure); input gradients: "
                        "forward kernel 2, oneDNN 1"
                      : "conv weight gradients: gemm 0, oneDNN 0 (measure); input gradients: "
                        "forward kernel 0, oneDNN 2"));
}

// 3x3 at stride 2: measure times the phases on an even input; on an odd one (where a phase
// would be a row short) a preset "+forward" runs oneDNN's backward data: its very bits.
BOOST_AUTO_TEST_CASE(stride_2_phases_apply_to_an_even_input_only) {
  auto measure = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  std::unique_ptr<ConvOp> even;
  input_gradient(*measure, kCases[8], 61, "", &even);
  BOOST_TEST(even->weight_grad_times().data_onednn_ms > 0.0);
  BOOST_TEST(even->weight_grad_times().data_forward_ms > 0.0);
  const ConvCase odd{{16, 32, 3, 2, 1, false, false}, {2, 16, 7, 9}};
  BOOST_TEST(same_bits(input_gradient(*measure, odd, 62, "onednn+forward"),
                       input_gradient(*onednn, odd, 62)));
}

// Presets: "+forward" where it cannot apply, a gemm weight gradient beside a bias, an unknown
// word: one-line errors; the counts follow what ran; outside measure presets are ignored and
// oneDNN's kernel runs.
BOOST_AUTO_TEST_CASE(presets_and_their_errors) {
  auto measure = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto strided = measure->make_conv({8, 16, 3, 2, 0, false, false});
  BOOST_TEST(error_of([&] { strided->preset_weight_grad("gemm+forward"); }) ==
             "conv backward: 'gemm+forward' for a 3x3 convolution of stride 2 and padding 0; the "
             "forward kernel gives input gradients at stride 1 and padding (kernel - 1) / 2, and "
             "3x3 at stride 2 and padding 1");
  strided->preset_weight_grad("gemm");  // the weight gradient alone: taken
  BOOST_TEST(strided->weight_grad_choice() == "gemm");
  auto with_bias = measure->make_conv({8, 16, 3, 1, 1, true, false});
  BOOST_TEST(error_of([&] { with_bias->preset_weight_grad("gemm+forward"); }) ==
             "conv backward: 'gemm+forward' for a convolution with a bias, whose weight gradient "
             "is oneDNN's (onednn)");
  with_bias->preset_weight_grad("onednn+forward");
  BOOST_TEST(with_bias->weight_grad_choice() == "onednn+forward");
  BOOST_TEST(error_of([&] { with_bias->preset_weight_grad("onednn+fft"); }) ==
             "conv backward: unknown paths 'onednn+fft' (gemm or onednn, then +forward for the "
             "input gradient by the forward kernel, then +winograd or +direct for the algorithm)");

  // Counted once an input gradient ran; a preset after that moves the count with the path.
  auto counted = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  std::unique_ptr<ConvOp> ran;
  input_gradient(*counted, kCases[0], 52, "onednn+forward", &ran);
  BOOST_TEST(counted->op_choices() ==
             "conv weight gradients: gemm 0, oneDNN 1 (measure); input gradients: forward kernel "
             "1, oneDNN 0");
  ran->preset_weight_grad("onednn");
  BOOST_TEST(counted->op_choices() ==
             "conv weight gradients: gemm 0, oneDNN 1 (measure); input gradients: forward kernel "
             "0, oneDNN 1");
  counted->make_conv(kCases[0].spec)->preset_weight_grad("onednn+forward");  // never runs
  BOOST_TEST(counted->op_choices() ==
             "conv weight gradients: gemm 0, oneDNN 2 (measure); input gradients: forward kernel "
             "0, oneDNN 1");

  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  std::unique_ptr<ConvOp> op;
  const std::vector<float> got = input_gradient(*onednn, kCases[3], 51, "onednn+forward", &op);
  BOOST_TEST(op->weight_grad_choice() == "");
  BOOST_TEST(!same_bits(got, input_gradient(*measure, kCases[3], 51, "onednn+forward")));
}

BOOST_AUTO_TEST_SUITE_END()
