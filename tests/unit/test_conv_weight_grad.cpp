// test_conv_weight_grad.cpp — the cpu backend's convolution weight gradient by one matmul over
// the unfolded input (train.conv_weight_grad = gemm) against oneDNN's kernel and the reference
// loops, in fp32 and bf16, on inputs in oneDNN's blocked layouts; bitwise repeatable; measure
// deciding once per convolution; the deck key's errors.
#include <boost/test/unit_test.hpp>

#include "conv_case.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// Both orientations of the gemm path: the same-size stride-1 convolutions (3x3 padded, 1x1, a
// 5x5 on odd sizes, a 4x4 image) and the rest (strided, 1x1 strided, a 3x3 without padding, a
// 1-wide image whose last tap at stride 2 lies right of it); channel counts off oneDNN's
// blocks of 16, and 1-row images, whose taps read past neighbouring planes. 32x32 images run
// the first orientation in chunks (4 images of the 5, then the last alone).
const ConvCase kCases[] = {
    {{8, 16, 3, 1, 1, false, false}, {5, 8, 32, 32}},
    {{16, 32, 3, 1, 1, false, false}, {2, 16, 9, 9}},
    {{16, 32, 3, 2, 1, false, false}, {3, 16, 9, 9}},
    {{32, 24, 1, 2, 0, false, false}, {2, 32, 8, 8}},
    {{32, 48, 1, 1, 0, false, false}, {2, 32, 5, 5}},
    {{5, 7, 5, 1, 2, false, false}, {2, 5, 11, 7}},
    {{64, 64, 3, 1, 1, false, true}, {2, 64, 4, 4}},
    {{8, 8, 3, 2, 1, false, false}, {2, 8, 3, 1}},
    {{6, 10, 3, 1, 0, false, false}, {2, 6, 7, 9}},
    {{4, 4, 3, 1, 1, false, false}, {3, 4, 1, 5}},
};

// dw of one convolution whose input comes out of a 1x1 convolution before it and whose dy is
// the output of its own forward pass: both in the layouts oneDNN chose, as in training.
// preset, when given, goes to the op before its first pass; *choice gets its choice after.
std::vector<float> weight_gradient(Backend& be, const ConvCase& c, uint64_t seed,
                                   const std::string& preset = "", std::string* choice = nullptr) {
  const ConvSpec& s = c.spec;
  ConvInputs in = conv_inputs_as_in_training(be, c, seed);
  auto op = be.make_conv(s);
  if (!preset.empty()) op->preset_weight_grad(preset);
  Tensor y, dw = be.alloc({s.out_channels, s.in_channels, s.kernel, s.kernel});
  op->forward(in.x, in.w, nullptr, y);
  op->backward_weights(in.x, y, dw, nullptr);
  if (choice) *choice = op->weight_grad_choice();
  return to_host(be, dw);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_weight_grad)

// fp32: the matmul path against oneDNN's kernel and the reference loops (a few ulps of
// different summation orders).
BOOST_AUTO_TEST_CASE(gemm_matches_onednn_and_the_reference_in_fp32) {
  auto gemm = cpu_or_skip(Precision::kF32, ConvWeightGrad::kGemm);
  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  auto ref = make_backend("ref", 2);
  for (const ConvCase& c : kCases) {
    print_conv_case("fp32", c);
    const std::vector<float> got = weight_gradient(*gemm, c, 31);
    expect_close("gemm vs oneDNN", got, weight_gradient(*onednn, c, 31), 2e-5);
    expect_close("gemm vs ref", got, weight_gradient(*ref, c, 31), 2e-5);
  }
  BOOST_TEST(gemm->op_choices() == "conv weight gradients: gemm 10, oneDNN 0 (gemm)");
  BOOST_TEST(onednn->op_choices() == "conv weight gradients: gemm 0, oneDNN 10 (onednn)");
}

// bf16: both paths multiply the same bf16 values and accumulate in fp32, so they differ only
// by summation order, as in fp32 (not by bf16 rounding).
BOOST_AUTO_TEST_CASE(gemm_matches_onednn_in_bf16) {
  auto gemm = cpu_or_skip(Precision::kBF16, ConvWeightGrad::kGemm);
  auto onednn = cpu_or_skip(Precision::kBF16, ConvWeightGrad::kOnednn);
  if (!gemm) return;
  for (const ConvCase& c : kCases) {
    print_conv_case("bf16", c);
    expect_close("gemm vs oneDNN", weight_gradient(*gemm, c, 41), weight_gradient(*onednn, c, 41),
                 2e-5);
  }
}

// The same inputs twice through the matmul path: the same bits.
BOOST_AUTO_TEST_CASE(gemm_is_bitwise_repeatable) {
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    auto be = cpu_or_skip(precision, ConvWeightGrad::kGemm);
    if (!be) continue;
    for (const ConvCase& c : kCases) {
      const std::vector<float> a = weight_gradient(*be, c, 51), b = weight_gradient(*be, c, 51);
      BOOST_TEST(same_bits(a, b));
    }
  }
}

// What a convolution call needs only while it runs (x and dy in a primitive's layouts, the
// weights for backward data, the weight gradient before its reorder into the plain one, the
// matmul path's unfold and product) is one scratch shared by the backend's convolutions, grown
// to the largest need: further convolutions of the same shape take no host memory beyond what
// the first one's passes took, and give its bits.
BOOST_AUTO_TEST_CASE(call_scratch_is_shared_by_every_convolution) {
  for (Precision precision : {Precision::kF32, Precision::kBF16})
    for (ConvWeightGrad path : {ConvWeightGrad::kOnednn, ConvWeightGrad::kGemm}) {
      auto be = cpu_or_skip(precision, path);
      if (!be) continue;
      for (const ConvCase& c : {kCases[0], kCases[2]}) {  // in chunks (stride 1); strided
        print_conv_case(precision == Precision::kF32 ? "fp32" : "bf16", c);
        const ConvSpec& s = c.spec;
        const ConvInputs in = conv_inputs_as_in_training(*be, c, 61);
        std::vector<std::unique_ptr<ConvOp>> ops;
        std::vector<Tensor> ys(4), dws;
        for (Tensor& y : ys) {
          ops.push_back(be->make_conv(s));
          ops.back()->forward(in.x, in.w, nullptr, y);
          dws.push_back(be->alloc({s.out_channels, s.in_channels, s.kernel, s.kernel}));
        }
        Tensor dx;
        auto backward = [&](size_t i) {
          ops[i]->backward_data(ys[i], in.w, dx);
          ops[i]->backward_weights(in.x, ys[i], dws[i], nullptr);
        };
        backward(0);
        const size_t after_first = be->memory_use().in_use;
        for (size_t i = 1; i < ops.size(); ++i) backward(i);
        BOOST_TEST(be->memory_use().in_use == after_first);
        BOOST_TEST(same_bits(to_host(*be, dws[0]), to_host(*be, dws[3])));
      }
    }
}

// measure times both paths of each gradient in scratch of its own and gives it back with the
// decision: a convolution leaves in use what the same convolution leaves with its choices
// preset (no path it did not choose holds memory).
BOOST_AUTO_TEST_CASE(measure_leaves_only_the_chosen_paths_scratch) {
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    auto timed = cpu_or_skip(precision, ConvWeightGrad::kMeasure);
    auto preset = cpu_or_skip(precision, ConvWeightGrad::kMeasure);
    if (!timed) continue;
    for (const ConvCase& c : {kCases[0], kCases[1], kCases[2], kCases[6]}) {
      std::string choice;
      size_t taken[2] = {0, 0};
      for (int run = 0; run < 2; ++run) {
        Backend& be = run == 0 ? *timed : *preset;
        const ConvSpec& s = c.spec;
        const ConvInputs in = conv_inputs_as_in_training(be, c, 71);
        auto op = be.make_conv(s);
        if (run == 1) op->preset_weight_grad(choice);
        Tensor y, dx, dw = be.alloc({s.out_channels, s.in_channels, s.kernel, s.kernel});
        op->forward(in.x, in.w, nullptr, y);
        const size_t before = be.memory_use().in_use;
        op->backward_data(y, in.w, dx);
        op->backward_weights(in.x, y, dw, nullptr);
        taken[run] = be.memory_use().in_use - before;
        if (run == 0) choice = op->weight_grad_choice();
      }
      print_conv_case(choice.c_str(), c);
      BOOST_TEST(taken[0] == taken[1]);
    }
  }
}

// measure decides each convolution once, at its first backward pass, whichever way; a
// convolution with a bias takes oneDNN's kernel (the bias gradient is its alone).
BOOST_AUTO_TEST_CASE(measure_decides_once_per_convolution) {
  auto be = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  for (const ConvCase& c : kCases) {
    const std::vector<float> got = weight_gradient(*be, c, 61);
    auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
    expect_close("measure vs oneDNN", got, weight_gradient(*onednn, c, 61), 2e-5);
  }
  // Each case made two convolutions (the 1x1 before it has no backward): ten decided.
  const std::string choices = be->op_choices();
  std::printf("%s\n", choices.c_str());
  int gemm = -1, onednn = -1;
  BOOST_TEST_REQUIRE(std::sscanf(choices.c_str(), "conv weight gradients: gemm %d, oneDNN %d",
                                 &gemm, &onednn) == 2);
  BOOST_TEST(gemm + onednn == 10);
  BOOST_TEST(choices.find("(measure)") != std::string::npos);

  auto with_bias = cpu_or_skip(Precision::kF32, ConvWeightGrad::kGemm);
  auto op = with_bias->make_conv({3, 4, 3, 1, 1, true, false});
  Tensor x = random_tensor(*with_bias, {1, 3, 5, 5}, 71), y,
         w = random_tensor(*with_bias, {4, 3, 3, 3}, 72);
  Tensor b = random_tensor(*with_bias, {4}, 73), dw = with_bias->alloc({4, 3, 3, 3}),
         db = with_bias->alloc({4});
  op->forward(x, w, &b, y);
  op->backward_weights(x, y, dw, &db);
  BOOST_TEST(with_bias->op_choices() == "conv weight gradients: gemm 0, oneDNN 1 (gemm)");
}

// A preset path (rank 0's, a checkpoint's) is taken without timing and gives that path's bits;
// presetting over a timed choice replaces it, and op_choices counts what each holds now. Only
// measure has choices: elsewhere the path is the key's and presets are ignored.
BOOST_AUTO_TEST_CASE(preset_choices_replace_the_timed_ones) {
  auto measure = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto gemm = cpu_or_skip(Precision::kF32, ConvWeightGrad::kGemm);
  auto onednn = cpu_or_skip(Precision::kF32, ConvWeightGrad::kOnednn);
  const ConvCase& c = kCases[4];  // a 5x5 kernel on 11x7 images: the two paths' sums differ
  const std::vector<float> by_gemm = weight_gradient(*gemm, c, 81);
  const std::vector<float> by_onednn = weight_gradient(*onednn, c, 81);
  BOOST_TEST(!same_bits(by_gemm, by_onednn));  // the two paths are told apart by their bits
  std::string choice;
  BOOST_TEST(same_bits(weight_gradient(*measure, c, 81, "gemm", &choice), by_gemm));
  BOOST_TEST(choice == "gemm");
  BOOST_TEST(same_bits(weight_gradient(*measure, c, 81, "onednn", &choice), by_onednn));
  BOOST_TEST(choice == "onednn");
  // (no input gradient ran: none counted)
  BOOST_TEST(measure->op_choices() ==
             "conv weight gradients: gemm 1, oneDNN 1 (measure); input "
             "gradients: forward kernel 0, oneDNN 0");

  // Timed first, then the other path preset: the next pass runs it, the counts move.
  auto again = cpu_or_skip(Precision::kF32, ConvWeightGrad::kMeasure);
  auto op = again->make_conv(c.spec);
  BOOST_TEST(op->weight_grad_choice() == "");  // undecided
  BOOST_TEST(op->weight_grad_times().onednn_ms == 0.0);
  const Shape w_shape{c.spec.out_channels, c.spec.in_channels, c.spec.kernel, c.spec.kernel};
  Tensor x = random_tensor(*again, c.x_shape, 82), y;
  Tensor w = random_tensor(*again, w_shape, 83, -0.3f, 0.3f);
  // (a fresh op on the raw input: the first pass times, the preset pass below is compared)
  Tensor dw = again->alloc(w_shape);
  op->forward(x, w, nullptr, y);
  op->backward_weights(x, y, dw, nullptr);
  const std::string timed = op->weight_grad_choice(), other = timed == "gemm" ? "onednn" : "gemm";
  BOOST_TEST((timed == "gemm" || timed == "onednn"));
  const ConvOp::WeightGradTimes times = op->weight_grad_times();  // what the choice rests on
  BOOST_TEST(times.onednn_ms > 0.0);
  BOOST_TEST(times.gemm_ms > 0.0);
  BOOST_TEST(timed == (times.onednn_ms < times.gemm_ms ? "onednn" : "gemm"));
  op->preset_weight_grad(other);
  BOOST_TEST(op->weight_grad_choice() == other);
  BOOST_TEST(again->op_choices() == str(other == "gemm"
                                            ? "conv weight gradients: gemm 1, oneDNN 0 (measure)"
                                            : "conv weight gradients: gemm 0, oneDNN 1 (measure)",
                                        "; input gradients: forward kernel 0, oneDNN 0"));
  auto reference = cpu_or_skip(Precision::kF32,
                               other == "gemm" ? ConvWeightGrad::kGemm : ConvWeightGrad::kOnednn);
  auto ref_op = reference->make_conv(c.spec);
  Tensor ry, rdw = reference->alloc(w_shape);
  Tensor rx = random_tensor(*reference, c.x_shape, 82);
  Tensor rw = random_tensor(*reference, w_shape, 83, -0.3f, 0.3f);
  ref_op->forward(rx, rw, nullptr, ry);
  ref_op->backward_weights(rx, ry, rdw, nullptr);
  op->backward_weights(x, y, dw, nullptr);
  BOOST_TEST(same_bits(to_host(*again, dw), to_host(*reference, rdw)));

  BOOST_TEST(same_bits(weight_gradient(*gemm, c, 81, "onednn", &choice), by_gemm));
  BOOST_TEST(choice == "");  // gemm by the key: no choice, the preset ignored
  BOOST_TEST(error_of([&] { op->preset_weight_grad("im2col"); }) ==
             "conv backward: unknown paths 'im2col' (gemm or onednn, then +forward for the "
             "input gradient by the forward kernel, then +winograd or +direct for the "
             "algorithm)");
}

BOOST_AUTO_TEST_CASE(names_and_errors) {
  BOOST_TEST((parse_conv_weight_grad("measure") == ConvWeightGrad::kMeasure));
  BOOST_TEST(std::string(conv_weight_grad_name(ConvWeightGrad::kGemm)) == "gemm");
  BOOST_TEST(error_of([] { parse_conv_weight_grad("im2col"); }) ==
             "unknown convolution weight-gradient path 'im2col': choose onednn, gemm or measure");
  BOOST_TEST(make_backend("ref", 1, Precision::kF32, ConvWeightGrad::kGemm)->op_choices() == "");
}

BOOST_AUTO_TEST_SUITE_END()
