// test_norm_relu_pool.cpp — batch norm + ReLU + max pool as one op: the cpu backend's fused
// loops against the reference's batch norm and max pool, synchronized across two ranks, the
// same bits at any thread count, the layouts it leaves to oneDNN, and the layer around it.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nn_test_util.hpp"
#include "norm_outputs.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/graph.hpp"
#include "ringtrain/nn/layers.hpp"
#include "two_rank_reducer.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

struct Case {
  Shape x_shape;
  int window;
};

// The cases: 16 channels (one nChw16c run, as fibernet's stem), 40 (three runs, the last
// padded), odd sizes with a row and a column past the last tile, a 3x3 window.
const Case kCases[] = {{{4, 16, 8, 8}, 2}, {{2, 40, 9, 7}, 2}, {{3, 16, 9, 10}, 3}};

// Runs op on x (already on be) with seeded gamma, beta (a third of them negative, so that the
// ReLU cuts whole tiles) and dy (seeded too, or the values given).
NormOutputs run(Backend& be, NormReluMaxPoolOp& op, const Tensor& x, uint64_t seed,
                const StatReducer* reducer = nullptr,
                const std::vector<float>* dy_values = nullptr) {
  const int c = int(x.dim(1));
  Tensor gamma = random_tensor(be, {c}, seed, 0.5f, 1.5f);
  Tensor beta = random_tensor(be, {c}, seed + 1, -1.0f, 0.5f);
  Tensor y, mean, var, dx, dgamma = be.alloc({c}), dbeta = be.alloc({c});
  const double count = op.forward_training(x, gamma, beta, y, mean, var, reducer);
  Tensor dy =
      dy_values ? to_device(be, y.shape(), *dy_values) : random_tensor(be, y.shape(), seed + 2);
  op.backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, reducer);
  return download_norm_outputs(be, count, y, mean, var, dx, dgamma, dbeta);
}

void print_case(const char* what, const Case& c) {
  std::printf("%s: x %s, window %d\n", what, shape_str(c.x_shape).c_str(), c.window);
}

// The share of pooled outputs the ReLU cut to 0: the cases must exercise tiles without a
// winner as well as tiles with one.
void expect_some_tiles_cut(const std::vector<float>& y) {
  const double cut = double(std::count(y.begin(), y.end(), 0.0f)) / double(y.size());
  std::printf("  relu cuts %.0f%% of the tiles\n", 100 * cut);
  BOOST_TEST((cut > 0.05 && cut < 0.8));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(norm_relu_pool)

BOOST_AUTO_TEST_CASE(fused_matches_reference_batch_norm_then_max_pool) {
  for (const Case& c : kCases) {
    print_case("fp32", c);
    auto cpu = make_backend("cpu", 2);
    auto ref = make_backend("ref", 2);
    const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 71);
    const NormReluMaxPoolSpec spec{int(c.x_shape[1]), 1e-5f, c.window};
    auto fused = cpu->make_norm_relu_max_pool(spec);
    auto composed = ref->make_norm_relu_max_pool(spec);
    NormOutputs got = run(*cpu, *fused, as_conv_output(*cpu, c.x_shape, xv), 72);
    NormOutputs want = run(*ref, *composed, to_device(*ref, c.x_shape, xv), 72);
    BOOST_TEST(cpu->op_choices() == "batch norm + ReLU + max pool: fused 1, oneDNN 0");
    expect_some_tiles_cut(want.y);
    expect_all_close(got, want);
  }
}

// The statistics and sums of each (image, channel run) plane are its own and are added in one
// order: the same bits whatever the thread count, and from one run to the next.
BOOST_AUTO_TEST_CASE(same_bits_at_any_thread_count) {
  for (const Case& c : kCases) {
    print_case("threads 1 and 2", c);
    const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 81);
    const NormReluMaxPoolSpec spec{int(c.x_shape[1]), 1e-5f, c.window};
    NormOutputs out[3];
    for (int i = 0; i < 3; ++i) {
      auto be = make_backend("cpu", i == 0 ? 1 : 2);
      auto op = be->make_norm_relu_max_pool(spec);
      out[i] = run(*be, *op, as_conv_output(*be, c.x_shape, xv), 82);
    }
    for (int i = 1; i < 3; ++i) {
      expect_same_bits(out[i], out[0]);
    }
  }
}

// The bundle's build (x86-64-v3) takes 8 lanes at a time where this one takes 16: each lane's
// arithmetic is the same, so are the bits (RINGTRAIN_CPU_PACK_LANES=8 runs that width here), in
// both precisions; another value is refused by name.
BOOST_AUTO_TEST_CASE(same_bits_at_either_pack_width) {
  for (const Case& c : kCases)
    for (Precision precision : {Precision::kF32, Precision::kBF16}) {
      print_case(
          precision == Precision::kBF16 ? "bf16, packs of 16 and 8" : "fp32, packs of 16 and 8", c);
      const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 86);
      const NormReluMaxPoolSpec spec{int(c.x_shape[1]), 1e-5f, c.window};
      NormOutputs out[2];
      bool ran = true;
      for (int narrow = 0; narrow < 2; ++narrow) {
        if (narrow) setenv("RINGTRAIN_CPU_PACK_LANES", "8", 1);
        std::unique_ptr<Backend> be;
        try {
          be = make_backend("cpu", 2, precision);
        } catch (const InputError& e) {
          std::printf("  skipped: %s\n", e.what());
          ran = false;
        }
        unsetenv("RINGTRAIN_CPU_PACK_LANES");
        if (!ran) break;
        auto op = be->make_norm_relu_max_pool(spec);
        out[narrow] = run(*be, *op, as_conv_output(*be, c.x_shape, xv), 87);
      }
      if (!ran) continue;
      expect_same_bits(out[1], out[0]);
    }
  setenv("RINGTRAIN_CPU_PACK_LANES", "4", 1);
  BOOST_TEST(error_of([] { make_backend("cpu", 2); }) ==
             "RINGTRAIN_CPU_PACK_LANES=4: only 8 (the AVX2 build's width, for tests) may be set");
  unsetenv("RINGTRAIN_CPU_PACK_LANES");
}

// Two ranks with half the batch each and a reducer equal one rank with the whole batch: the
// statistics and the input gradient's sums are every rank's, dgamma and dbeta each rank's own.
BOOST_AUTO_TEST_CASE(synchronized_across_two_ranks_equals_the_whole_batch) {
  const Shape whole{4, 16, 6, 6}, half{2, 16, 6, 6};
  const NormReluMaxPoolSpec spec{16, 1e-5f, 2};
  const std::vector<float> xv = tiles_without_ties(whole, 2, 91);
  const std::vector<float> dy_half = random_values(size_t(2 * 16 * 3 * 3), 93);
  TwoRankReducer reducer;
  NormOutputs got[2];
  auto rank = [&](int r) {
    auto be = make_backend("cpu", 1);
    auto op = be->make_norm_relu_max_pool(spec);
    const StatReducer red = reducer.for_rank(r);
    got[r] = run(*be, *op, as_conv_output(*be, half, half_of(xv, r)), 92, &red, &dy_half);
  };
  run_two_ranks(rank);
  BOOST_TEST(got[0].count == double(4 * 6 * 6));
  BOOST_TEST(got[1].count == double(4 * 6 * 6));
  // Each rank's loss is a mean over its half: in the whole batch's mean each half's gradient
  // is halved, so the whole batch's dy is half of the ranks' and each rank's dx twice its.
  auto ref = make_backend("ref", 2);
  auto composed = ref->make_norm_relu_max_pool(spec);
  const std::vector<float> dy_whole = scaled(concat(dy_half, dy_half), 0.5f);
  NormOutputs want = run(*ref, *composed, to_device(*ref, whole, xv), 92, nullptr, &dy_whole);
  for (int r = 0; r < 2; ++r) {
    expect_close("batch mean, rank " + std::to_string(r), got[r].mean, want.mean, 2e-5);
    expect_close("batch var, rank " + std::to_string(r), got[r].var, want.var, 1e-4);
  }
  expect_close("y, both ranks", concat(got[0].y, got[1].y), want.y, 2e-5);
  expect_close("dx, both ranks", concat(got[0].dx, got[1].dx), scaled(want.dx, 2.0f), 1e-4);
  std::vector<float> dgamma(got[0].dgamma), dbeta(got[0].dbeta);
  for (size_t c = 0; c < dgamma.size(); ++c) {
    dgamma[c] += got[1].dgamma[c];
    dbeta[c] += got[1].dbeta[c];
  }
  expect_close("dgamma, the ranks' summed", dgamma, scaled(want.dgamma, 2.0f), 2e-5);
  expect_close("dbeta, the ranks' summed", dbeta, scaled(want.dbeta, 2.0f), 2e-5);
}

// A layout the loops do not walk (plain nchw: one channel per run) runs oneDNN's batch norm
// and max pool, counted as such, with the same results.
BOOST_AUTO_TEST_CASE(plain_layout_runs_onednn_batch_norm_and_pool) {
  const Case c{{2, 16, 6, 6}, 2};
  auto cpu = make_backend("cpu", 2);
  auto ref = make_backend("ref", 2);
  const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 101);
  const NormReluMaxPoolSpec spec{16, 1e-5f, 2};
  auto op = cpu->make_norm_relu_max_pool(spec);
  auto composed = ref->make_norm_relu_max_pool(spec);
  NormOutputs got = run(*cpu, *op, to_device(*cpu, c.x_shape, xv), 102);
  NormOutputs want = run(*ref, *composed, to_device(*ref, c.x_shape, xv), 102);
  // The composed batch norm on the plain layout is oneDNN's too.
  BOOST_TEST(cpu->op_choices() ==
             "batch norm + ReLU + max pool: fused 0, oneDNN 1; batch norm: own passes 0, oneDNN 1");
  expect_close("y", got.y, want.y, 2e-5);
  expect_close("dx", got.dx, want.dx, 1e-4);
  expect_close("dgamma", got.dgamma, want.dgamma, 2e-5);
}

// A NaN or inf in x reaches every output of its channel as NaN (the trainer's non-finite check
// then sees it in the loss and gradients), and no other channel.
BOOST_AUTO_TEST_CASE(non_finite_input_poisons_its_channel_only) {
  const Shape shape{2, 16, 4, 4};
  const int64_t hw = 16;
  for (float bad : {std::nanf(""), INFINITY}) {
    auto cpu = make_backend("cpu", 2);
    Tensor x = as_conv_output(*cpu, shape, tiles_without_ties(shape, 2, 131));
    // Written in place (a convolution would spread it, 0 x NaN being NaN): image 1, channel 3,
    // pixel (1, 1), at its nChw16c offset; the download below says where it landed.
    x.f32()[1 * 16 * hw + (1 * 4 + 1) * 16 + 3] = bad;
    const std::vector<float> landed = to_host(*cpu, x);
    const float at = landed[size_t((1 * 16 + 3) * hw + 5)];
    BOOST_TEST_REQUIRE((std::isnan(bad) ? std::isnan(at) : at == bad));
    auto op = cpu->make_norm_relu_max_pool({16, 1e-5f, 2});
    NormOutputs out = run(*cpu, *op, x, 132);
    BOOST_TEST(cpu->op_choices() == "batch norm + ReLU + max pool: fused 1, oneDNN 0");
    const ChannelPoison p = poison_of(out.y, 16, 4, 3);  // y is [2, 16, 2, 2]
    std::printf("x holds %g: %zu of 8 pooled outputs of its channel NaN, %zu elsewhere\n", bad,
                p.nan_in_channel, p.non_finite_elsewhere);
    BOOST_TEST(p.nan_in_channel == 8u);
    BOOST_TEST(p.non_finite_elsewhere == 0u);
  }
}

// RINGTRAIN_CPU_NORM_POOL=separate runs oneDNN's two primitives on a layout the loops walk (to
// time the two, or to rule the loops out); any value but fused or separate is refused by name.
BOOST_AUTO_TEST_CASE(environment_switch_runs_onednn_or_is_refused) {
  const Shape shape{2, 16, 6, 6};
  const std::vector<float> xv = tiles_without_ties(shape, 2, 121);
  const NormReluMaxPoolSpec spec{16, 1e-5f, 2};
  NormOutputs out[2];
  for (const char* setting : {"separate", "fused"}) {
    setenv("RINGTRAIN_CPU_NORM_POOL", setting, 1);
    auto cpu = make_backend("cpu", 2);
    auto op = cpu->make_norm_relu_max_pool(spec);
    const bool fused = std::string(setting) == "fused";
    out[fused] = run(*cpu, *op, as_conv_output(*cpu, shape, xv), 122);
    // Composed, the stem's batch norm runs our own passes on the blocked layout.
    BOOST_TEST(cpu->op_choices() == str("batch norm + ReLU + max pool: fused ", int(fused),
                                        ", oneDNN ", int(!fused),
                                        fused ? "" : "; batch norm: own passes 1, oneDNN 0"));
  }
  expect_close("y, fused against oneDNN's", out[1].y, out[0].y, 2e-5);
  expect_close("dx, fused against oneDNN's", out[1].dx, out[0].dx, 1e-4);
  setenv("RINGTRAIN_CPU_NORM_POOL", "fuse", 1);
  auto cpu = make_backend("cpu", 2);
  BOOST_TEST(error_of([&] { cpu->make_norm_relu_max_pool(spec); }) ==
             "RINGTRAIN_CPU_NORM_POOL=fuse: use fused (the default) or separate");
  unsetenv("RINGTRAIN_CPU_NORM_POOL");
}

namespace {

// The host values of what collect() gives: every parameter's value and gradient, then every
// buffer (the running statistics).
std::vector<std::vector<float>> state_of(Backend& be, nn::Layer& layer) {
  std::vector<nn::Parameter*> params;
  std::vector<nn::NamedBuffer> buffers;
  layer.collect(params, buffers);
  std::vector<std::vector<float>> out;
  for (nn::Parameter* p : params) {
    out.push_back(to_host(be, p->value));
    out.push_back(to_host(be, p->grad));
  }
  for (const nn::NamedBuffer& b : buffers) out.push_back(to_host(be, *b.tensor));
  return out;
}

void set_parameters(Backend& be, nn::Layer& layer, uint64_t seed) {
  std::vector<nn::Parameter*> params;
  std::vector<nn::NamedBuffer> buffers;
  layer.collect(params, buffers);
  for (nn::Parameter* p : params)
    be.upload(random_values(size_t(p->numel()), seed++).data(), p->value);
}

std::string nodes_of(const nn::Layer& layer) {
  nn::Graph graph;
  layer.trace(graph, "x");
  std::string out;
  for (const nn::GraphNode& n : graph.nodes())
    out += str(int(n.op), " ", n.layer, " ", n.inputs.at(0), " -> ", n.output, " k", n.kernel, " s",
               n.stride, " p", n.padding, " eps", n.eps, "\n");
  return out;
}

}  // namespace

// The layer trains through the op with BatchNorm2d's parameters, names and running statistics,
// and infers and traces as the two layers it stands for: on ref (whose op runs those layers'
// ops) the same bits, on cpu (the fused loops) the same numbers.
BOOST_AUTO_TEST_CASE(layer_equals_the_batch_norm_and_max_pool_layers) {
  const Shape shape{4, 16, 8, 8};
  for (const std::string name : {"ref", "cpu"}) {
    std::printf("%s: BatchNormReluMaxPool against BatchNorm2d (relu) then max pool\n",
                name.c_str());
    auto be = make_backend(name, 2);
    nn::BatchNormReluMaxPool fused("bn1", "maxpool", *be, 16, 2);
    nn::Sequential two("");
    two.add(std::make_unique<nn::BatchNorm2d>("bn1", *be, 16, true));
    two.add(nn::max_pool2d("maxpool", *be, 2, 2));
    set_parameters(*be, fused, 111);
    set_parameters(*be, two, 111);
    BOOST_TEST(nodes_of(fused) == nodes_of(two));
    const Tensor x = as_conv_output(*be, shape, tiles_without_ties(shape, 2, 112));
    const Tensor dy = random_tensor(*be, fused.output_shape(shape), 113);
    std::vector<float> y[2], dx[2], y_eval[2];
    std::vector<std::vector<float>> state[2];
    nn::Layer* layers[2] = {&fused, &two};
    for (int i = 0; i < 2; ++i) {
      y[i] = to_host(*be, layers[i]->forward(x, true));
      dx[i] = to_host(*be, layers[i]->backward(dy, [](nn::Parameter&) {}));
      y_eval[i] = to_host(*be, layers[i]->forward(x, false));
      state[i] = state_of(*be, *layers[i]);
    }
    BOOST_TEST_REQUIRE(state[0].size() == 6u);  // gamma, its gradient, beta, its gradient, 2 stats
    if (name == "ref") {
      BOOST_TEST(same_bits(y[0], y[1]));
      BOOST_TEST(same_bits(y_eval[0], y_eval[1]));
      BOOST_TEST(same_bits(dx[0], dx[1]));
      for (size_t k = 0; k < state[0].size(); ++k) BOOST_TEST(same_bits(state[0][k], state[1][k]));
      continue;
    }
    expect_close("y", y[0], y[1], 2e-5);
    expect_close("dx", dx[0], dx[1], 1e-4);
    // The two layers' ops on running statistics as close as these.
    expect_close("y (inference)", y_eval[0], y_eval[1], 1e-4);
    const char* names[] = {"gamma", "dgamma", "beta", "dbeta", "running mean", "running var"};
    for (size_t k = 0; k < state[0].size(); ++k)
      expect_close(names[k], state[0][k], state[1][k], 1e-4);
  }
}

BOOST_AUTO_TEST_SUITE_END()
