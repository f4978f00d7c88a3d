// test_max_pool_relu.cpp — a max pool and its ReLU as one op: the cpu backend's fused loops
// against the reference's pool then ReLU (the same values: both only choose), ties and NaN,
// the same bits at either pack width, thread count and with the input gradient streamed, the
// layouts and the switch that leave it to oneDNN, and the layer around it.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../src/backend/cpu/lane_pack.hpp"  // streamed_outputs
#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/graph.hpp"
#include "ringtrain/nn/layers.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

struct Case {
  Shape x_shape;
  int window;
};

// 32 channels (two nChw16c runs, as cnn_small's first pool), 40 (three runs, the last padded),
// a row and a column past the last tile, a 3x3 window.
const Case kCases[] = {{{4, 32, 8, 8}, 2}, {{2, 40, 9, 7}, 2}, {{3, 16, 9, 10}, 3}};

struct PoolOutputs {
  std::vector<float> y, dx;
};

// op's training forward on x (on be) and its backward of a seeded dy (or the values given).
PoolOutputs run(Backend& be, PoolOp& op, const Tensor& x, uint64_t seed,
                const std::vector<float>* dy_values = nullptr) {
  Tensor y, dx;
  op.forward(x, y, true);
  const Tensor dy =
      dy_values ? to_device(be, y.shape(), *dy_values) : random_tensor(be, y.shape(), seed);
  op.backward(dy, dx);
  return {to_host(be, y), to_host(be, dx)};
}

void print_case(const char* what, const Case& c) {
  std::printf("%s: x %s, window %d\n", what, shape_str(c.x_shape).c_str(), c.window);
}

size_t count_of(const std::vector<float>& v, float value) {
  size_t n = 0;
  for (float f : v) n += f == value;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(max_pool_relu)

// Pooling and ReLU only choose values: the fused loops give the reference's values exactly,
// the ReLU cutting a share of whole tiles (no gradient there).
BOOST_AUTO_TEST_CASE(fused_equals_reference_pool_then_relu) {
  for (const Case& c : kCases) {
    print_case("fp32", c);
    auto cpu = make_backend("cpu", 2);
    auto ref = make_backend("ref", 2);
    const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 501, 0.1f);
    auto fused = cpu->make_max_pool_relu(c.window);
    auto composed = ref->make_max_pool_relu(c.window);
    const PoolOutputs got = run(*cpu, *fused, as_conv_output(*cpu, c.x_shape, xv), 502);
    const PoolOutputs want = run(*ref, *composed, to_device(*ref, c.x_shape, xv), 502);
    BOOST_TEST(cpu->op_choices() == "max pool + ReLU: fused 1, oneDNN 0");
    const size_t cut = count_of(want.y, 0.0f);
    std::printf("  relu cuts %zu of %zu tiles\n", cut, want.y.size());
    BOOST_TEST((cut > want.y.size() / 20 && cut < want.y.size() / 2));
    BOOST_TEST(got.y == want.y, boost::test_tools::per_element());
    BOOST_TEST(got.dx == want.dx, boost::test_tools::per_element());
  }
}

// Of equal largest values the first in the tile takes the gradient; a tile whose largest is 0
// or below gives none; a NaN is passed over (as oneDNN's, cuDNN's and the reference's pools do):
// the fused loops and the reference's two ops alike.
BOOST_AUTO_TEST_CASE(ties_zero_and_nan_tiles) {
  const Shape shape{1, 16, 2, 8};  // four 2x2 tiles per channel
  std::vector<float> xv(size_t(shape_numel(shape)), -1.0f);
  for (int64_t c = 0; c < 16; ++c) {
    float* x = xv.data() + c * 16;                  // rows of 8
    x[0] = 2, x[1] = 2, x[8] = 1, x[9] = 2;         // tile 0: a tie of 2s, the first wins
    x[2] = 0, x[3] = -3, x[10] = -1, x[11] = -2;    // tile 1: largest 0, cut
    x[4] = 5, x[5] = 0, x[12] = 7, x[13] = 0;       // tile 2: 7, NaNs at 5 and 13 set below
    x[6] = -5, x[7] = -4, x[14] = 0.5f, x[15] = 3;  // tile 3: 3 at its last place
  }
  const float nan = std::nanf("");
  // The fused loops, oneDNN's pool and ReLU (RINGTRAIN_CPU_POOL_RELU=separate), the reference.
  for (const std::string variant : {"cpu", "cpu separate", "ref"}) {
    std::printf("%s: a tie, a cut tile, a NaN tile\n", variant.c_str());
    const std::string name = variant.substr(0, 3);
    if (variant == "cpu separate") setenv("RINGTRAIN_CPU_POOL_RELU", "separate", 1);
    auto be = make_backend(name, 2);
    auto op = be->make_max_pool_relu(2);
    unsetenv("RINGTRAIN_CPU_POOL_RELU");
    Tensor x;
    if (name == "ref") {
      std::vector<float> with_nan = xv;
      for (int64_t c = 0; c < 16; ++c)
        with_nan[size_t(c * 16 + 5)] = with_nan[size_t(c * 16 + 13)] = nan;
      x = to_device(*be, shape, with_nan);
    } else {
      // In place at their nChw16c offsets (a convolution would spread a NaN to every channel).
      x = as_conv_output(*be, shape, xv);
      for (int64_t c = 0; c < 16; ++c)
        for (int64_t pixel : {5, 13}) x.f32()[pixel * 16 + c] = nan;
    }
    BOOST_TEST_REQUIRE(std::isnan(to_host(*be, x)[13]));
    const std::vector<float> dy(64, 10.0f);
    const PoolOutputs out = run(*be, *op, x, 0, &dy);
    if (name == "cpu")
      BOOST_TEST(be->op_choices() == (variant == "cpu" ? "max pool + ReLU: fused 1, oneDNN 0"
                                                       : "max pool + ReLU: fused 0, oneDNN 1"));
    for (int64_t c = 0; c < 16; ++c) {
      const float* y = out.y.data() + c * 4;
      const float* dx = out.dx.data() + c * 16;
      BOOST_TEST(y[0] == 2.0f);
      BOOST_TEST(y[1] == 0.0f);
      BOOST_TEST(y[2] == 7.0f);
      BOOST_TEST(y[3] == 3.0f);
      const std::vector<float> got(dx, dx + 16);
      const std::vector<float> want{10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 10};
      BOOST_TEST(got == want, boost::test_tools::per_element());
    }
  }
}

// The loops work plane by plane and lane by lane: the same bits at 1 and 2 threads and at packs
// of 16 and 8 lanes (the bundle's build), fp32 and bf16 where the machine has it.
BOOST_AUTO_TEST_CASE(same_bits_at_any_thread_count_and_pack_width) {
  for (const Case& c : kCases)
    for (Precision precision : {Precision::kF32, Precision::kBF16}) {
      print_case(precision == Precision::kBF16 ? "bf16" : "fp32", c);
      const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 511);
      PoolOutputs out[3];
      bool ran = true;
      for (int i = 0; i < 3 && ran; ++i) {  // 2 threads; 1 thread; packs of 8
        if (i == 2) setenv("RINGTRAIN_CPU_PACK_LANES", "8", 1);
        try {
          auto be = make_backend("cpu", i == 1 ? 1 : 2, precision);
          auto op = be->make_max_pool_relu(c.window);
          out[i] = run(*be, *op, as_conv_output(*be, c.x_shape, xv), 512);
          BOOST_TEST(be->op_choices() == "max pool + ReLU: fused 1, oneDNN 0");
        } catch (const InputError& e) {
          std::printf("  skipped: %s\n", e.what());
          ran = false;
        }
        unsetenv("RINGTRAIN_CPU_PACK_LANES");
      }
      if (!ran) continue;
      for (int i = 1; i < 3; ++i) {
        BOOST_TEST(same_bits(out[i].y, out[0].y));
        BOOST_TEST(same_bits(out[i].dx, out[0].dx));
      }
    }
}

// An input gradient of 4 MiB and more is written past the caches (one streamed pass), the same
// bits as with RINGTRAIN_STREAM_STORES=off; x 16 x 32 x 32 x 65 has a column past the last tile.
BOOST_AUTO_TEST_CASE(input_gradient_streams_the_same_bits) {
  const Shape shape{16, 32, 32, 65};
  const std::vector<float> xv = random_values(size_t(shape_numel(shape)), 521, -1, 1);
  PoolOutputs out[2];
  uint64_t streamed[2];
  for (int on = 0; on < 2; ++on) {
    setenv("RINGTRAIN_STREAM_STORES", on ? "on" : "off", 1);
    auto be = make_backend("cpu", 2);
    auto op = be->make_max_pool_relu(2);
    const uint64_t before = cpu::streamed_outputs();
    out[on] = run(*be, *op, as_conv_output(*be, shape, xv), 522);
    streamed[on] = cpu::streamed_outputs() - before;
    unsetenv("RINGTRAIN_STREAM_STORES");
  }
  BOOST_TEST(streamed[0] == 0u);
  BOOST_TEST(streamed[1] == 1u);
  BOOST_TEST(same_bits(out[1].y, out[0].y));
  BOOST_TEST(same_bits(out[1].dx, out[0].dx));
}

// A layout the loops do not walk (plain nchw: one channel per run), and any layout with
// RINGTRAIN_CPU_POOL_RELU=separate, run oneDNN's pool and ReLU, counted as such, with the same
// values; any other value of the switch is refused by name.
BOOST_AUTO_TEST_CASE(plain_layout_and_switch_run_onednn) {
  const Case c{{2, 16, 6, 6}, 2};
  const std::vector<float> xv = tiles_without_ties(c.x_shape, c.window, 531);
  auto ref = make_backend("ref", 2);
  auto composed = ref->make_max_pool_relu(2);
  const PoolOutputs want = run(*ref, *composed, to_device(*ref, c.x_shape, xv), 532);
  for (int separate = 0; separate < 2; ++separate) {
    if (separate) setenv("RINGTRAIN_CPU_POOL_RELU", "separate", 1);
    auto cpu = make_backend("cpu", 2);
    auto op = cpu->make_max_pool_relu(2);
    const Tensor x =
        separate ? as_conv_output(*cpu, c.x_shape, xv) : to_device(*cpu, c.x_shape, xv);
    const PoolOutputs got = run(*cpu, *op, x, 532);
    BOOST_TEST(cpu->op_choices() == "max pool + ReLU: fused 0, oneDNN 1");
    BOOST_TEST(got.y == want.y, boost::test_tools::per_element());
    BOOST_TEST(got.dx == want.dx, boost::test_tools::per_element());
    unsetenv("RINGTRAIN_CPU_POOL_RELU");
  }
  setenv("RINGTRAIN_CPU_POOL_RELU", "fuse", 1);
  auto cpu = make_backend("cpu", 2);
  BOOST_TEST(error_of([&] { cpu->make_max_pool_relu(2); }) ==
             "RINGTRAIN_CPU_POOL_RELU=fuse: use fused (the default) or separate");
  unsetenv("RINGTRAIN_CPU_POOL_RELU");
}

// A backward needs a training forward's winners (or, composed, its ReLU's output): before one,
// after release_saved, and for a second time after a composed backward, it is refused by name
// rather than reading freed memory.
BOOST_AUTO_TEST_CASE(backward_without_a_training_forward_is_refused) {
  const Shape shape{2, 16, 4, 4};
  // RT_CHECK's message: the source place, then this.
  const std::string refused = ": max pool + ReLU: backward before a training forward";
  const auto is_refused = [&](const std::string& message) {
    return message.size() > refused.size() &&
           message.compare(message.size() - refused.size(), refused.size(), refused) == 0;
  };
  for (const std::string name : {"cpu", "ref"}) {
    auto be = make_backend(name, 2);
    const Tensor x = as_conv_output(*be, shape, random_values(size_t(shape_numel(shape)), 551));
    const Tensor dy = random_tensor(*be, {2, 16, 2, 2}, 552);
    auto op = be->make_max_pool_relu(2);
    Tensor y, dx;
    BOOST_TEST(is_refused(error_of([&] { op->backward(dy, dx); })));
    op->forward(x, y, false);  // inference keeps nothing to go back through
    BOOST_TEST(is_refused(error_of([&] { op->backward(dy, dx); })));
    op->forward(x, y, true);
    op->backward(dy, dx);
    op->release_saved();
    BOOST_TEST(is_refused(error_of([&] { op->backward(dy, dx); })));
  }
}

// The layer trains and infers as the max pool and ReLU layers it stands for and traces as them
// (the ONNX export and predict's plan read the trace): on ref, cpu and (with a GPU) cuda, whose
// op composes its pool and ReLU, the same values.
BOOST_AUTO_TEST_CASE(layer_equals_the_pool_and_relu_layers) {
  const Shape shape{4, 32, 8, 8};
  std::vector<std::string> backends = testable_backends();
  backends.insert(backends.begin(), "ref");
  for (const std::string& name : backends) {
    std::printf("%s: MaxPoolReLU against max pool then ReLU\n", name.c_str());
    auto be = make_backend(name, 2);
    nn::MaxPoolReLU fused("pool1", "relu1", *be, 2);
    nn::Sequential two("");
    two.add(nn::max_pool2d("pool1", *be, 2, 2));
    two.add(std::make_unique<nn::ReLU>("relu1", *be));
    nn::Graph graphs[2];
    fused.trace(graphs[0], "x");
    two.trace(graphs[1], "x");
    BOOST_TEST_REQUIRE(graphs[0].nodes().size() == 2u);
    BOOST_TEST_REQUIRE(graphs[1].nodes().size() == 2u);
    for (size_t n = 0; n < 2; ++n) {
      const nn::GraphNode &a = graphs[0].nodes()[n], &b = graphs[1].nodes()[n];
      BOOST_TEST((a.op == b.op && a.layer == b.layer && a.inputs == b.inputs &&
                  a.output == b.output && a.kernel == b.kernel && a.stride == b.stride));
    }
    BOOST_TEST(fused.output_shape(shape) == two.output_shape(shape));
    const Tensor x = as_conv_output(*be, shape, tiles_without_ties(shape, 2, 541));
    const Tensor dy = random_tensor(*be, fused.output_shape(shape), 542);
    std::vector<float> y[2], dx[2], y_eval[2];
    nn::Layer* layers[2] = {&fused, &two};
    for (int i = 0; i < 2; ++i) {
      y[i] = to_host(*be, layers[i]->forward(x, true));
      dx[i] = to_host(*be, layers[i]->backward(dy, [](nn::Parameter&) {}));
      y_eval[i] = to_host(*be, layers[i]->forward(x, false));
    }
    BOOST_TEST(y[0] == y[1], boost::test_tools::per_element());
    BOOST_TEST(dx[0] == dx[1], boost::test_tools::per_element());
    BOOST_TEST(y_eval[0] == y_eval[1], boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
