// test_norm_passes.cpp — the cpu backend's own batch norm passes (norm_passes.hpp: statistics,
// normalise with or without ReLU, the backward's sums and input gradient) on the blocked layout a
// convolution writes, against the reference's batch norm; the same bits at any thread count and
// pack width, synchronized across two ranks, NaN and inf kept to their channel, and the
// environment's switch back to oneDNN's primitives.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nn_test_util.hpp"
#include "norm_outputs.hpp"
#include "ringtrain/core/bf16.hpp"
#include "ringtrain/core/error.hpp"
#include "two_rank_reducer.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// A batch norm's training forward and backward (with its ReLU where `relu`: dy is then the
// gradient of the ReLU's output); gamma, beta and dy seeded (dy given where dy_values is).
NormOutputs run(Backend& be, const Tensor& x, bool relu, uint64_t seed,
                const StatReducer* reducer = nullptr,
                const std::vector<float>* dy_values = nullptr) {
  const int c = int(x.dim(1));
  Tensor gamma = random_tensor(be, {c}, seed, 0.5f, 1.5f), beta = random_tensor(be, {c}, seed + 1);
  auto bn = be.make_batch_norm({c, 1e-5f, relu});
  Tensor y, mean, var, dx, dgamma = be.alloc({c}), dbeta = be.alloc({c});
  const double count = bn->forward_training(x, gamma, beta, y, mean, var, reducer);
  const Tensor dy =
      dy_values ? to_device(be, y.shape(), *dy_values) : random_tensor(be, y.shape(), seed + 2);
  bn->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, reducer);
  return download_norm_outputs(be, count, y, mean, var, dx, dgamma, dbeta);
}

// Whether the cpu backend runs bf16 here (AVX512-BF16 or AMX); the reason is said where not.
bool cpu_has_bf16() {
  try {
    make_backend("cpu", 1, Precision::kBF16);
    return true;
  } catch (const InputError& e) {
    std::printf("bf16 case skipped: %s\n", e.what());
    return false;
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(norm_passes)

// 16 channels (one run of nChw16c), 40 (three runs, the last padded), 4x4 images; with and
// without the ReLU.
BOOST_AUTO_TEST_CASE(own_passes_match_the_reference_batch_norm) {
  for (const Shape& shape : {Shape{4, 16, 8, 8}, Shape{2, 40, 5, 7}, Shape{3, 32, 4, 4}})
    for (bool relu : {false, true}) {
      std::printf("fp32: x %s, relu %d\n", shape_str(shape).c_str(), relu);
      auto cpu = make_backend("cpu", 2);
      auto ref = make_backend("ref", 2);
      const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 201, -1, 3);
      NormOutputs got = run(*cpu, as_conv_output(*cpu, shape, xv), relu, 202);
      NormOutputs want = run(*ref, to_device(*ref, shape, xv), relu, 202);
      BOOST_TEST(cpu->op_choices() == "batch norm: own passes 1, oneDNN 0");
      expect_all_close(got, want);
    }
}

BOOST_AUTO_TEST_CASE(same_bits_at_any_thread_count) {
  const Shape shape{4, 40, 6, 6};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 211, -1, 3);
  for (bool relu : {false, true}) {
    NormOutputs out[3];
    for (int i = 0; i < 3; ++i) {
      auto be = make_backend("cpu", i == 0 ? 1 : 2);
      out[i] = run(*be, as_conv_output(*be, shape, xv), relu, 212);
    }
    expect_same_bits(out[1], out[0]);
    expect_same_bits(out[2], out[0]);
  }
}

// The bundle's build takes 8 lanes at a time where this one takes 16: the same bits, in fp32
// and in bf16 (RINGTRAIN_CPU_PACK_LANES=8 runs that width here).
BOOST_AUTO_TEST_CASE(same_bits_at_either_pack_width) {
  const Shape shape{4, 48, 6, 6};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 216, -1, 3);
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    if (precision == Precision::kBF16 && !cpu_has_bf16()) continue;
    NormOutputs out[2];
    for (int narrow = 0; narrow < 2; ++narrow) {
      if (narrow) setenv("RINGTRAIN_CPU_PACK_LANES", "8", 1);
      auto be = make_backend("cpu", 2, precision);
      unsetenv("RINGTRAIN_CPU_PACK_LANES");
      out[narrow] = run(*be, as_conv_output(*be, shape, xv), true, 217);
    }
    expect_same_bits(out[1], out[0]);
  }
}

// Two ranks with half the batch each and a reducer equal one rank with the whole batch: the
// statistics are every rank's, and so are the backward's sums.
BOOST_AUTO_TEST_CASE(synchronized_across_two_ranks_equals_the_whole_batch) {
  const Shape whole{4, 16, 5, 5}, half{2, 16, 5, 5};
  const std::vector<float> xv = random_values(size_t(shape_numel(whole)), 221, -1, 3);
  const std::vector<float> dy_half = random_values(xv.size() / 2, 222);
  for (bool relu : {false, true}) {
    TwoRankReducer reducer;
    NormOutputs got[2];
    auto rank = [&](int r) {
      auto be = make_backend("cpu", 1);
      const StatReducer red = reducer.for_rank(r);
      got[r] = run(*be, as_conv_output(*be, half, half_of(xv, r)), relu, 223, &red, &dy_half);
    };
    run_two_ranks(rank);
    BOOST_TEST(got[0].count == double(4 * 5 * 5));
    // Each rank's loss is a mean over its half: the whole batch's dy is half the ranks', and
    // each rank's dx twice the whole batch's.
    auto ref = make_backend("ref", 2);
    const std::vector<float> dy_whole = scaled(concat(dy_half, dy_half), 0.5f);
    NormOutputs want = run(*ref, to_device(*ref, whole, xv), relu, 223, nullptr, &dy_whole);
    expect_close("batch mean, rank 1", got[1].mean, want.mean, 2e-5);
    expect_close("batch var, rank 0", got[0].var, want.var, 1e-4);
    expect_close("y, both ranks", concat(got[0].y, got[1].y), want.y, 2e-5);
    expect_close("dx, both ranks", concat(scaled(got[0].dx, 0.5f), scaled(got[1].dx, 0.5f)),
                 want.dx, 1e-4);
    // dgamma and dbeta are each rank's own: the gradient allreduce sums them.
    for (size_t c = 0; c < 16; ++c)
      BOOST_TEST(std::fabs(got[0].dbeta[c] + got[1].dbeta[c] - 2 * want.dbeta[c]) <=
                 1e-4 * (1 + std::fabs(want.dbeta[c])));
  }
}

// A NaN or inf in x reaches every output of its channel as NaN, and no other channel, in fp32
// and in bf16 (whose outputs are stored without a second rounding).
BOOST_AUTO_TEST_CASE(non_finite_input_poisons_its_channel_only) {
  const Shape shape{2, 16, 4, 4};
  for (Precision precision : {Precision::kF32, Precision::kBF16})
    for (float bad : {std::nanf(""), INFINITY}) {
      if (precision == Precision::kBF16 && !cpu_has_bf16()) continue;
      auto cpu = make_backend("cpu", 2, precision);
      Tensor x = as_conv_output(*cpu, shape, random_values(size_t(shape_numel(shape)), 231));
      // In place at image 1, channel 3, pixel (1, 1) of nChw16c.
      const size_t at = 1 * 16 * 16 + (1 * 4 + 1) * 16 + 3;
      if (precision == Precision::kBF16)
        static_cast<uint16_t*>(x.raw())[at] = float_to_bf16(bad);
      else
        x.f32()[at] = bad;
      const float stored = to_host(*cpu, x)[size_t((1 * 16 + 3) * 16 + 5)];
      BOOST_TEST_REQUIRE((std::isnan(bad) ? std::isnan(stored) : stored == bad));
      for (bool relu : {false, true}) {
        const NormOutputs out = run(*cpu, x, relu, 232);
        const ChannelPoison p = poison_of(out.y, 16, 16, 3);
        std::printf(
            "%s, x holds %g, relu %d: %zu of 32 outputs of its channel NaN, %zu elsewhere\n",
            precision_name(precision), bad, relu, p.nan_in_channel, p.non_finite_elsewhere);
        BOOST_TEST(p.nan_in_channel == 32u);
        BOOST_TEST(p.non_finite_elsewhere == 0u);
      }
    }
}

// A NaN gamma reaches every output of its channel as NaN in bf16 too, whatever its payload: one
// whose mantissa bits are all set would round, as a finite a x + b rounds, to -0 (the carry runs
// through the exponent), and the ReLU would then let 0 through.
BOOST_AUTO_TEST_CASE(nan_gamma_poisons_its_channel_in_bf16) {
  if (!cpu_has_bf16()) return;
  const Shape shape{2, 16, 4, 4};
  auto cpu = make_backend("cpu", 2, Precision::kBF16);
  const Tensor x = as_conv_output(*cpu, shape, random_values(size_t(shape_numel(shape)), 236));
  std::vector<float> g = random_values(16, 237, 0.5f, 1.5f);
  const uint32_t full_payload = 0x7fffffffu;
  std::memcpy(&g[5], &full_payload, sizeof(float));
  const Tensor gamma = to_device(*cpu, {16}, g), beta = random_tensor(*cpu, {16}, 238);
  for (bool relu : {false, true}) {
    auto bn = cpu->make_batch_norm({16, 1e-5f, relu});
    Tensor y, mean, var;
    bn->forward_training(x, gamma, beta, y, mean, var, nullptr);
    const std::vector<float> out = to_host(*cpu, y);
    const ChannelPoison p = poison_of(out, 16, 16, 5);
    BOOST_TEST(p.nan_in_channel == 32u, "relu " << relu);
    BOOST_TEST(p.non_finite_elsewhere == 0u, "relu " << relu);
  }
}

// RINGTRAIN_CPU_BATCH_NORM=onednn runs oneDNN's primitives (counted so, the same numbers to the
// reference's tolerances); any value but own or onednn is refused by name.
BOOST_AUTO_TEST_CASE(environment_switch_runs_onednn_or_is_refused) {
  const Shape shape{2, 16, 6, 6};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 241, -1, 3);
  NormOutputs out[2];
  for (const char* setting : {"onednn", "own"}) {
    setenv("RINGTRAIN_CPU_BATCH_NORM", setting, 1);
    auto cpu = make_backend("cpu", 2);
    const bool own = std::string(setting) == "own";
    out[own] = run(*cpu, as_conv_output(*cpu, shape, xv), true, 242);
    BOOST_TEST(cpu->op_choices() ==
               str("batch norm: own passes ", int(own), ", oneDNN ", int(!own)));
  }
  expect_all_close(out[1], out[0]);
  setenv("RINGTRAIN_CPU_BATCH_NORM", "oneDNN", 1);
  auto cpu = make_backend("cpu", 2);
  BOOST_TEST(error_of([&] {
               cpu->make_batch_norm({16, 1e-5f, true});
             }) == "RINGTRAIN_CPU_BATCH_NORM=oneDNN: use own (the default) or onednn");
  unsetenv("RINGTRAIN_CPU_BATCH_NORM");
}

BOOST_AUTO_TEST_SUITE_END()
