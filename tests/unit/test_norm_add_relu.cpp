// test_norm_add_relu.cpp — batch norm + residual + ReLU in one pass (the cpu backend's own loop,
// BatchNormOp::forward_training_add_relu) against the reference's batch norm then add, with
// oneDNN's backward after it; synchronized across two ranks, the same bits at any thread count,
// the environment's switch, and a residual block either way; on a GPU, cuDNN's fused kernel.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "norm_outputs.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "two_rank_reducer.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// relu(bn(x) + r) forward through the op's fused pass, or (where it declines) its batch norm
// then an add with ReLU; backward of the batch norm on dy masked by the ReLU. gamma, beta, r
// and dy seeded (dy given where dy_values is).
NormOutputs run(Backend& be, const Tensor& x, const Tensor& r, uint64_t seed,
                const StatReducer* reducer = nullptr,
                const std::vector<float>* dy_values = nullptr) {
  const int c = int(x.dim(1));
  Tensor gamma = random_tensor(be, {c}, seed, 0.5f, 1.5f), beta = random_tensor(be, {c}, seed + 1);
  auto bn = be.make_batch_norm({c, 1e-5f, false});
  Tensor y, normed, mean, var, masked, dx, dgamma = be.alloc({c}), dbeta = be.alloc({c});
  double count = bn->forward_training_add_relu(x, gamma, beta, r, y, mean, var, reducer);
  if (count == 0) {
    count = bn->forward_training(x, gamma, beta, normed, mean, var, reducer);
    be.make_add(true)->forward(normed, r, y);
  }
  const Tensor dy =
      dy_values ? to_device(be, y.shape(), *dy_values) : random_tensor(be, y.shape(), seed + 2);
  be.make_relu()->backward(y, dy, masked);
  bn->backward(x, masked, gamma, mean, var, dx, dgamma, dbeta, reducer);
  return download_norm_outputs(be, count, y, mean, var, dx, dgamma, dbeta);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(norm_add_relu)

// x in the blocked layout a convolution writes (16 channels, one run; 40, three runs, the last
// padded), the residual once in that layout and once plain (reordered by the op).
BOOST_AUTO_TEST_CASE(fused_matches_reference_batch_norm_then_add) {
  for (const Shape& shape : {Shape{4, 16, 8, 8}, Shape{2, 40, 5, 7}})
    for (bool plain_residual : {false, true}) {
      std::printf("fp32: x %s, residual %s\n", shape_str(shape).c_str(),
                  plain_residual ? "plain" : "in x's layout");
      auto cpu = make_backend("cpu", 2);
      auto ref = make_backend("ref", 2);
      const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 141, -1, 3);
      const std::vector<float> rv = random_values(xv.size(), 142);
      const Tensor r =
          plain_residual ? to_device(*cpu, shape, rv) : as_conv_output(*cpu, shape, rv);
      NormOutputs got = run(*cpu, as_conv_output(*cpu, shape, xv), r, 143);
      NormOutputs want = run(*ref, to_device(*ref, shape, xv), to_device(*ref, shape, rv), 143);
      BOOST_TEST(cpu->op_choices() == "batch norm + residual + ReLU: fused 1, oneDNN 0");
      expect_all_close(got, want);
    }
}

// cuda: cuDNN's BN_ADD_ACTIVATION kernel on NHWC activations, in bf16 and in tf32 (fp32 data),
// against the reference on the same values (x, the residual and dy exact in bf16, so that
// rounding them decides no ReLU mask); op_choices says it ran fused, so the case cannot pass
// on the separate path. bf16 stores y and dx rounded (2^-9 relative); tf32 leaves batch norm
// in fp32.
BOOST_AUTO_TEST_CASE(cuda_runs_batch_norm_residual_and_relu_as_one_kernel,
                     *boost::unit_test::precondition(GpuPresent())) {
  const Shape shape{4, 32, 8, 8};
  const auto bf16_exact = [](std::vector<float> v) {
    for (float& f : v) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      std::memcpy(&f, &u, 4);
    }
    return v;
  };
  const std::vector<float> xv = bf16_exact(random_values(size_t(shape_numel(shape)), 151, -1, 3));
  const std::vector<float> rv = bf16_exact(random_values(xv.size(), 152));
  const std::vector<float> dyv = bf16_exact(random_values(xv.size(), 153));
  auto ref = make_backend("ref", 1);
  const NormOutputs want =
      run(*ref, to_device(*ref, shape, xv), to_device(*ref, shape, rv), 154, nullptr, &dyv);
  for (const Precision precision : {Precision::kBF16, Precision::kTF32}) {
    BOOST_TEST_CONTEXT(precision_name(precision)) {
      CudaOptions options;
      options.precision = precision;
      auto gpu = make_cuda_backend(options);
      const NormOutputs got =
          run(*gpu, to_device(*gpu, shape, xv), to_device(*gpu, shape, rv), 154, nullptr, &dyv);
      BOOST_TEST(gpu->op_choices().find("batch norm + residual + ReLU: fused 1, separate 0") !=
                     std::string::npos,
                 gpu->op_choices());
      // bf16 stores y and dx rounded; the statistics and parameter gradients are fp32 sums.
      const NormTolerances bf16{1e-2, 1e-4, 1e-4, 1e-2, 1e-3, 1e-3};
      expect_all_close(got, want, precision == Precision::kTF32 ? NormTolerances{} : bf16);
    }
  }
}

BOOST_AUTO_TEST_CASE(same_bits_at_any_thread_count) {
  const Shape shape{4, 40, 6, 6};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 151, -1, 3);
  const std::vector<float> rv = random_values(xv.size(), 152);
  NormOutputs out[3];
  for (int i = 0; i < 3; ++i) {
    auto be = make_backend("cpu", i == 0 ? 1 : 2);
    out[i] = run(*be, as_conv_output(*be, shape, xv), as_conv_output(*be, shape, rv), 153);
  }
  expect_same_bits(out[1], out[0]);
  expect_same_bits(out[2], out[0]);
}

// The bundle's build takes 8 lanes at a time where this one takes 16: the same bits
// (RINGTRAIN_CPU_PACK_LANES=8 runs that width here).
BOOST_AUTO_TEST_CASE(same_bits_at_either_pack_width) {
  const Shape shape{4, 40, 6, 6};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 156, -1, 3);
  const std::vector<float> rv = random_values(xv.size(), 157);
  NormOutputs out[2];
  for (int narrow = 0; narrow < 2; ++narrow) {
    if (narrow) setenv("RINGTRAIN_CPU_PACK_LANES", "8", 1);
    auto be = make_backend("cpu", 2);
    unsetenv("RINGTRAIN_CPU_PACK_LANES");
    out[narrow] = run(*be, as_conv_output(*be, shape, xv), as_conv_output(*be, shape, rv), 158);
  }
  expect_same_bits(out[1], out[0]);
}

// Two ranks with half the batch each and a reducer equal one rank with the whole batch: the
// statistics are every rank's, and so are the backward's sums (its count is the fused pass's).
BOOST_AUTO_TEST_CASE(synchronized_across_two_ranks_equals_the_whole_batch) {
  const Shape whole{4, 16, 5, 5}, half{2, 16, 5, 5};
  const std::vector<float> xv = random_values(size_t(shape_numel(whole)), 161, -1, 3);
  const std::vector<float> rv = random_values(xv.size(), 162);
  const std::vector<float> dy_half = random_values(xv.size() / 2, 163);
  TwoRankReducer reducer;
  NormOutputs got[2];
  auto rank = [&](int r) {
    auto be = make_backend("cpu", 1);
    const StatReducer red = reducer.for_rank(r);
    got[r] = run(*be, as_conv_output(*be, half, half_of(xv, r)),
                 as_conv_output(*be, half, half_of(rv, r)), 164, &red, &dy_half);
  };
  run_two_ranks(rank);
  BOOST_TEST(got[0].count == double(4 * 5 * 5));
  // Each rank's loss is a mean over its half: the whole batch's dy is half the ranks', and each
  // rank's dx twice the whole batch's.
  auto ref = make_backend("ref", 2);
  std::vector<float> dy_whole = concat(dy_half, dy_half);
  for (float& v : dy_whole) v *= 0.5f;
  NormOutputs want =
      run(*ref, to_device(*ref, whole, xv), to_device(*ref, whole, rv), 164, nullptr, &dy_whole);
  for (float& v : want.dx) v *= 2.0f;
  expect_close("batch mean, rank 1", got[1].mean, want.mean, 2e-5);
  expect_close("batch var, rank 0", got[0].var, want.var, 1e-4);
  expect_close("y, both ranks", concat(got[0].y, got[1].y), want.y, 2e-5);
  expect_close("dx, both ranks", concat(got[0].dx, got[1].dx), want.dx, 1e-4);
}

// A NaN or inf in x reaches every output of its channel as NaN, and no other channel.
BOOST_AUTO_TEST_CASE(non_finite_input_poisons_its_channel_only) {
  const Shape shape{2, 16, 4, 4};
  for (float bad : {std::nanf(""), INFINITY}) {
    auto cpu = make_backend("cpu", 2);
    Tensor x = as_conv_output(*cpu, shape, random_values(size_t(shape_numel(shape)), 176));
    // In place at image 1, channel 3, pixel (1, 1) of nChw16c (a convolution would spread it).
    x.f32()[1 * 16 * 16 + (1 * 4 + 1) * 16 + 3] = bad;
    const float at = to_host(*cpu, x)[size_t((1 * 16 + 3) * 16 + 5)];
    BOOST_TEST_REQUIRE((std::isnan(bad) ? std::isnan(at) : at == bad));
    const Tensor r = as_conv_output(*cpu, shape, random_values(size_t(shape_numel(shape)), 177));
    const NormOutputs out = run(*cpu, x, r, 178);
    BOOST_TEST(cpu->op_choices() == "batch norm + residual + ReLU: fused 1, oneDNN 0");
    const ChannelPoison p = poison_of(out.y, 16, 16, 3);
    std::printf("x holds %g: %zu of 32 outputs of its channel NaN, %zu elsewhere\n", bad,
                p.nan_in_channel, p.non_finite_elsewhere);
    BOOST_TEST(p.nan_in_channel == 32u);
    BOOST_TEST(p.non_finite_elsewhere == 0u);
  }
}

// RINGTRAIN_CPU_NORM_ADD=separate declines the fused pass (the caller adds, counted as oneDNN);
// any value but fused or separate is refused by name.
BOOST_AUTO_TEST_CASE(environment_switch_declines_or_is_refused) {
  const Shape shape{2, 16, 4, 4};
  setenv("RINGTRAIN_CPU_NORM_ADD", "separate", 1);
  auto cpu = make_backend("cpu", 2);
  const Tensor x = as_conv_output(*cpu, shape, random_values(size_t(shape_numel(shape)), 171));
  auto bn = cpu->make_batch_norm({16, 1e-5f, false});
  Tensor gamma = random_tensor(*cpu, {16}, 172), beta = random_tensor(*cpu, {16}, 173), y, m, v;
  BOOST_TEST(bn->forward_training_add_relu(x, gamma, beta, x, y, m, v, nullptr) == 0.0);
  BOOST_TEST(y.empty());
  BOOST_TEST(cpu->op_choices() == "batch norm + residual + ReLU: fused 0, oneDNN 1");
  setenv("RINGTRAIN_CPU_NORM_ADD", "on", 1);
  BOOST_TEST(error_of([&] {
               cpu->make_batch_norm({16, 1e-5f, false});
             }) == "RINGTRAIN_CPU_NORM_ADD=on: use fused (the default) or separate");
  unsetenv("RINGTRAIN_CPU_NORM_ADD");
}

// A residual block (with and without its downsampling shortcut) trains alike through the fused
// pass and through batch norm then add: output, input gradient and every parameter's gradient.
BOOST_AUTO_TEST_CASE(block_trains_alike_either_way) {
  for (int stride : {1, 2}) {
    std::printf("BasicBlock 16->%d stride %d, fused against separate\n", 16 * stride, stride);
    const Shape shape{4, 16, 8, 8};
    const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 181);
    std::vector<float> y[2], dx[2], grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      setenv("RINGTRAIN_CPU_NORM_ADD", fused ? "fused" : "separate", 1);
      auto be = make_backend("cpu", 2);
      nn::BasicBlock block("block", *be, 16, 16 * stride, stride);
      std::vector<nn::Parameter*> params;
      std::vector<nn::NamedBuffer> buffers;
      block.collect(params, buffers);
      uint64_t seed = 182;
      for (nn::Parameter* p : params)
        be->upload(random_values(size_t(p->numel()), seed++, -0.5f, 0.5f).data(), p->value);
      const Tensor x = as_conv_output(*be, shape, xv);
      y[fused] = to_host(*be, block.forward(x, true));
      const Tensor dy = random_tensor(*be, block.output_shape(shape), 190);
      dx[fused] = to_host(*be, block.backward(dy, [](nn::Parameter&) {}));
      for (nn::Parameter* p : params) {
        const std::vector<float> g = to_host(*be, p->grad);
        grads[fused].insert(grads[fused].end(), g.begin(), g.end());
      }
      BOOST_TEST(be->op_choices().find(str("batch norm + residual + ReLU: fused ", fused)) == 0u,
                 be->op_choices());
    }
    unsetenv("RINGTRAIN_CPU_NORM_ADD");
    expect_close("block output", y[1], y[0], 2e-5);
    expect_close("block dx", dx[1], dx[0], 1e-4);
    expect_close("parameter gradients", grads[1], grads[0], 1e-4);
  }
}

BOOST_AUTO_TEST_SUITE_END()
