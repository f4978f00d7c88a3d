// test_backend_ops.cpp — every oneDNN op against the reference loops, forward and backward.
#include <algorithm>
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/core/bf16.hpp"
#include "ringtrain/core/error.hpp"
#include "two_rank_reducer.hpp"

#if RINGTRAIN_HAS_CUDA
#include <cuda_runtime_api.h>  // the reader in ready_marks_* copies device memory itself
#endif

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// A fast backend (oneDNN, or CUDA where a GPU is) and the reference, fed the same data.
struct Pair {
  explicit Pair(const std::string& name) : cpu(make_backend(name, 2)) {}
  std::unique_ptr<Backend> cpu;  // the backend under test, whichever it is
  std::unique_ptr<Backend> ref = make_backend("ref", 2);
  Backend& be(int i) { return i == 0 ? *cpu : *ref; }
};

namespace bdata = boost::unit_test::data;

// fp32 results of different summation orders: a few ulps of the largest value.
constexpr double kTol = 2e-5;

void check_conv(const std::string& name, const ConvSpec& s, const Shape& x_shape, uint64_t seed) {
  std::printf("%s: conv %d->%d k%d s%d p%d bias %d relu %d, x %s\n", name.c_str(), s.in_channels,
              s.out_channels, s.kernel, s.stride, s.padding, s.bias, s.fuse_relu,
              shape_str(x_shape).c_str());
  Pair p(name);
  Shape w_shape{s.out_channels, s.in_channels, s.kernel, s.kernel};
  Tensor x[2], w[2], b[2], y[2], dy[2], dx[2], dw[2], db[2];
  std::unique_ptr<ConvOp> op[2];
  for (int i = 0; i < 2; ++i) {
    Backend& be = p.be(i);
    x[i] = random_tensor(be, x_shape, seed);
    w[i] = random_tensor(be, w_shape, seed + 1, -0.3f, 0.3f);
    b[i] = random_tensor(be, {s.out_channels}, seed + 2);
    op[i] = be.make_conv(s);
    op[i]->forward(x[i], w[i], s.bias ? &b[i] : nullptr, y[i]);
  }
  expect_close("conv forward y", *p.cpu, y[0], *p.ref, y[1], kTol);
  for (int i = 0; i < 2; ++i) {
    Backend& be = p.be(i);
    dy[i] = random_tensor(be, y[1].shape(), seed + 3);
    dw[i] = be.alloc(w_shape);
    db[i] = be.alloc({s.out_channels});
    op[i]->backward_weights(x[i], dy[i], dw[i], s.bias ? &db[i] : nullptr);
    op[i]->backward_data(dy[i], w[i], dx[i]);
  }
  expect_close("conv backward dw", *p.cpu, dw[0], *p.ref, dw[1], kTol);
  if (s.bias) expect_close("conv backward dbias", *p.cpu, db[0], *p.ref, db[1], kTol);
  expect_close("conv backward dx", *p.cpu, dx[0], *p.ref, dx[1], kTol);
}

void check_pool(const std::string& name, const PoolSpec& s, const Shape& x_shape, uint64_t seed) {
  std::printf("%s: pool %s k%d s%d p%d global %d, x %s\n", name.c_str(),
              s.kind == PoolKind::kMax ? "max" : "avg", s.kernel, s.stride, s.padding, s.global,
              shape_str(x_shape).c_str());
  Pair p(name);
  Tensor x[2], y[2], y_eval[2], dy[2], dx[2];
  std::unique_ptr<PoolOp> op[2];
  for (int i = 0; i < 2; ++i) {
    Backend& be = p.be(i);
    x[i] = random_tensor(be, x_shape, seed);
    op[i] = be.make_pool(s);
    op[i]->forward(x[i], y_eval[i], false);
    op[i]->forward(x[i], y[i], true);
    dy[i] = random_tensor(be, y[i].shape(), seed + 1);
    op[i]->backward(dy[i], dx[i]);
  }
  expect_close("pool forward (inference)", *p.cpu, y_eval[0], *p.ref, y_eval[1], kTol);
  expect_close("pool forward (training)", *p.cpu, y[0], *p.ref, y[1], kTol);
  expect_close("pool backward dx", *p.cpu, dx[0], *p.ref, dx[1], kTol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(backend_ops)

BOOST_DATA_TEST_CASE(conv_matches_reference, bdata::make(testable_backends()), name) {
  check_conv(name, {3, 8, 3, 1, 1, true, false}, {2, 3, 9, 9}, 11);
  check_conv(name, {1, 32, 3, 1, 1, true, true}, {3, 1, 12, 12}, 12);
  check_conv(name, {16, 32, 3, 2, 1, false, false}, {2, 16, 9, 9}, 13);
  check_conv(name, {32, 32, 3, 1, 1, false, false}, {2, 32, 6, 6}, 14);
  check_conv(name, {16, 32, 1, 2, 0, false, false}, {2, 16, 8, 8}, 15);
  check_conv(name, {32, 64, 3, 1, 1, true, true}, {2, 32, 7, 7}, 16);
}

// backward_data reads forward's converted or reordered copy of the weights only when it is
// handed the forward's own weights (ConvOp's contract); other weights are read afresh, and
// either way dx has the same bits (cpu fp32 and bf16, cuda fp32, tf32 and bf16 deterministic
// where a GPU is).
BOOST_AUTO_TEST_CASE(conv_backward_data_reads_other_weights_afresh) {
  std::vector<std::pair<std::string, Precision>> cases{{"cpu", Precision::kF32},
                                                       {"cpu", Precision::kBF16}};
  if (cuda_testable())
    for (Precision p : {Precision::kF32, Precision::kTF32, Precision::kBF16})
      cases.push_back({"cuda", p});
  const ConvSpec spec{16, 32, 3, 1, 1, false, false};
  for (const auto& [name, precision] : cases) {
    // Deterministic: the same algorithms for every op (none chosen by timing).
    auto be = backend_or_skip("conv backward_data", name, precision, true);
    if (!be) continue;
    Tensor x = random_tensor(*be, {2, 16, 6, 6}, 41);
    Tensor w1 = random_tensor(*be, {32, 16, 3, 3}, 42, -0.2f, 0.2f);
    Tensor w2 = random_tensor(*be, {32, 16, 3, 3}, 43, -0.2f, 0.2f);
    Tensor dy = random_tensor(*be, {2, 32, 6, 6}, 44);
    auto dx_of = [&](const Tensor& forward_w, const Tensor& backward_w) {
      auto op = be->make_conv(spec);
      Tensor y, dx;
      op->forward(x, forward_w, nullptr, y);
      op->backward_data(dy, backward_w, dx);
      return to_host(*be, dx);
    };
    const std::string what = name + " " + precision_name(precision);
    // The forward's copy (w2 after w2, w1 after w1) against the weights read afresh (w2 after
    // w1, w1 after w2): the same bits either way, and w1 and w2 give different dx.
    const std::vector<float> w2_afresh = dx_of(w1, w2), w2_copy = dx_of(w2, w2);
    const std::vector<float> w1_afresh = dx_of(w2, w1), w1_copy = dx_of(w1, w1);
    BOOST_TEST(same_bits(w2_afresh, w2_copy),
               what << ": backward_data with w2 read the forward's w1");
    BOOST_TEST(same_bits(w1_afresh, w1_copy),
               what << ": backward_data with w1 read the forward's w2");
    BOOST_TEST(!same_bits(w1_copy, w2_copy), what << ": w1 and w2 gave the same dx");
  }
}

BOOST_DATA_TEST_CASE(linear_matches_reference, bdata::make(testable_backends()), name) {
  for (const Shape& x_shape : {Shape{5, 24}, Shape{3, 32, 2, 3}}) {
    std::printf("linear, x %s\n", shape_str(x_shape).c_str());
    int64_t f = shape_numel(x_shape) / x_shape[0];
    LinearSpec s{f, 7, true};
    Pair p(name);
    Tensor x[2], w[2], b[2], y[2], dy[2], dx[2], dw[2], db[2];
    for (int i = 0; i < 2; ++i) {
      Backend& be = p.be(i);
      x[i] = random_tensor(be, x_shape, 21);
      w[i] = random_tensor(be, {7, f}, 22);
      b[i] = random_tensor(be, {7}, 23);
      auto op = be.make_linear(s);
      op->forward(x[i], w[i], &b[i], y[i]);
      dy[i] = random_tensor(be, {x_shape[0], 7}, 24);
      dw[i] = be.alloc({7, f});
      db[i] = be.alloc({7});
      op->backward_weights(x[i], dy[i], dw[i], &db[i]);
      op->backward_data(dy[i], w[i], dx[i]);
    }
    expect_close("linear forward y", *p.cpu, y[0], *p.ref, y[1], kTol);
    expect_close("linear backward dw", *p.cpu, dw[0], *p.ref, dw[1], kTol);
    expect_close("linear backward dbias", *p.cpu, db[0], *p.ref, db[1], kTol);
    expect_close("linear backward dx", *p.cpu, dx[0], *p.ref, dx[1], kTol);
  }
}

BOOST_DATA_TEST_CASE(conv_output_in_blocked_layout_feeds_linear, bdata::make(testable_backends()),
                     name) {
  // A convolution's output stays in oneDNN's layout; Linear must read it in NCHW order.
  Pair p(name);
  Tensor x[2], w[2], y[2], fw[2], out[2], dout[2], dy[2];
  for (int i = 0; i < 2; ++i) {
    Backend& be = p.be(i);
    x[i] = random_tensor(be, {2, 16, 4, 4}, 31);
    w[i] = random_tensor(be, {32, 16, 3, 3}, 32, -0.2f, 0.2f);
    fw[i] = random_tensor(be, {5, 32 * 16}, 33, -0.1f, 0.1f);
    auto conv = be.make_conv({16, 32, 3, 1, 1, false, false});
    auto fc = be.make_linear({32 * 16, 5, false});
    conv->forward(x[i], w[i], nullptr, y[i]);
    fc->forward(y[i], fw[i], nullptr, out[i]);
    dout[i] = random_tensor(be, {2, 5}, 34);
    fc->backward_data(dout[i], fw[i], dy[i]);
  }
  std::printf("conv output layout: %s\n", y[0].is_plain() ? "plain" : "blocked");
  expect_close("linear of conv output", *p.cpu, out[0], *p.ref, out[1], kTol);
  expect_close("linear dx in conv layout", *p.cpu, dy[0], *p.ref, dy[1], kTol);
}

BOOST_DATA_TEST_CASE(batch_norm_matches_reference, bdata::make(testable_backends()), name) {
  for (bool relu : {false, true})
    for (const Shape& x_shape : {Shape{4, 3, 5, 5}, Shape{2, 32, 4, 4}}) {
      std::printf("batch norm%s, x %s\n", relu ? " + fused relu" : "", shape_str(x_shape).c_str());
      int c = int(x_shape[1]);
      Pair p(name);
      Tensor x[2], g[2], b[2], y[2], mean[2], var[2], dy[2], dx[2], dg[2], db[2], yi[2];
      for (int i = 0; i < 2; ++i) {
        Backend& be = p.be(i);
        // Channels with different offsets and spreads, as real activations have.
        x[i] = random_tensor(be, x_shape, 41, 0.5f, 3.0f);
        g[i] = random_tensor(be, {c}, 42, 0.5f, 1.5f);
        b[i] = random_tensor(be, {c}, 43);
        auto op = be.make_batch_norm({c, 1e-5f, relu});
        double count = op->forward_training(x[i], g[i], b[i], y[i], mean[i], var[i], nullptr);
        BOOST_TEST(count == double(x_shape[0] * x_shape[2] * x_shape[3]));
        dy[i] = random_tensor(be, x_shape, 44);
        dg[i] = be.alloc({c});
        db[i] = be.alloc({c});
        op->backward(x[i], dy[i], g[i], mean[i], var[i], dx[i], dg[i], db[i], nullptr);
        op->forward_inference(x[i], g[i], b[i], mean[i], var[i], yi[i]);
      }
      if (relu) {
        // The fused ReLU must bite: a fair share of outputs cut to 0, so that a backend
        // without the ReLU (or without the mask in backward) differs from the reference.
        std::vector<float> yr = to_host(*p.ref, y[1]), yir = to_host(*p.ref, yi[1]);
        double cut = double(std::count(yr.begin(), yr.end(), 0.0f)) / double(yr.size());
        double cut_inference =
            double(std::count(yir.begin(), yir.end(), 0.0f)) / double(yir.size());
        std::printf("  relu cuts %.0f%% (training), %.0f%% (inference)\n", 100 * cut,
                    100 * cut_inference);
        BOOST_TEST((cut > 0.2 && cut < 0.8));
        BOOST_TEST((cut_inference > 0.2 && cut_inference < 0.8));
      }
      expect_close("bn forward y", *p.cpu, y[0], *p.ref, y[1], kTol);
      expect_close("bn batch mean", *p.cpu, mean[0], *p.ref, mean[1], kTol);
      expect_close("bn batch var", *p.cpu, var[0], *p.ref, var[1], 1e-4);
      expect_close("bn backward dx", *p.cpu, dx[0], *p.ref, dx[1], 1e-4);
      expect_close("bn backward dgamma", *p.cpu, dg[0], *p.ref, dg[1], kTol);
      expect_close("bn backward dbeta", *p.cpu, db[0], *p.ref, db[1], kTol);
      expect_close("bn inference y", *p.cpu, yi[0], *p.ref, yi[1], kTol);
    }
}

namespace {

// Synchronized BN over two half batches equals plain BN over the whole batch.
void check_sync_batch_norm(const std::string& backend_name, bool relu) {
  const int c = 16, n = 4, hw = 5;
  std::printf("sync batch norm%s on %s: 2 ranks x batch %d vs 1 rank x batch %d\n",
              relu ? " + fused relu" : "", backend_name.c_str(), n / 2, n);
  auto whole_be = make_backend("ref", 2);
  std::vector<float> xv = random_values(size_t(n) * c * hw * hw, 51, 0.5f, 3.0f);
  std::vector<float> dyv = random_values(xv.size(), 52);
  std::vector<float> gv = random_values(c, 53, 0.5f, 1.5f), bv = random_values(c, 54);
  // The reference: one rank, the whole batch. Each half's loss is scaled by 1/2 in the
  // whole batch's mean, so its dy is half of each rank's dy.
  std::vector<float> dy_whole(dyv);
  for (float& v : dy_whole) v *= 0.5f;
  Tensor x = to_device(*whole_be, {n, c, hw, hw}, xv),
         dy = to_device(*whole_be, {n, c, hw, hw}, dy_whole);
  Tensor g = to_device(*whole_be, {c}, gv), b = to_device(*whole_be, {c}, bv);
  Tensor y, mean, var, dx, dg = whole_be->alloc({c}), db = whole_be->alloc({c});
  auto op = whole_be->make_batch_norm({c, 1e-5f, relu});
  op->forward_training(x, g, b, y, mean, var, nullptr);
  op->backward(x, dy, g, mean, var, dx, dg, db, nullptr);
  std::vector<float> y_ref = to_host(*whole_be, y), dx_ref = to_host(*whole_be, dx);
  // dx of the whole batch is half of what each rank computes for its own loss.
  for (float& v : dx_ref) v *= 2.0f;

  TwoRankReducer reducer;
  std::vector<float> y_got(xv.size()), dx_got(xv.size()), count(2);
  size_t half = xv.size() / 2;
  auto rank = [&](int r) {
    auto be = make_backend(backend_name, 1);
    Shape shape{n / 2, c, hw, hw};
    Tensor xt = to_device(*be, shape, half_of(xv, r)), dyt = to_device(*be, shape, half_of(dyv, r));
    Tensor gt = to_device(*be, {c}, gv), bt = to_device(*be, {c}, bv);
    Tensor yt, mt, vt, dxt, dgt = be->alloc({c}), dbt = be->alloc({c});
    StatReducer red = reducer.for_rank(r);
    auto bn = be->make_batch_norm({c, 1e-5f, relu});
    count[r] = float(bn->forward_training(xt, gt, bt, yt, mt, vt, &red));
    bn->backward(xt, dyt, gt, mt, vt, dxt, dgt, dbt, &red);
    be->download(yt, y_got.data() + r * half);
    be->download(dxt, dx_got.data() + r * half);
  };
  run_two_ranks(rank);
  BOOST_TEST(count[0] == float(n * hw * hw));
  BOOST_TEST(count[1] == float(n * hw * hw));
  expect_close("sync bn y (2 ranks vs whole batch)", y_got, y_ref, 1e-5);
  expect_close("sync bn dx (2 ranks vs whole batch)", dx_got, dx_ref, 1e-4);
}

}  // namespace

BOOST_AUTO_TEST_CASE(synchronized_batch_norm_equals_whole_batch) {
  for (bool relu : {false, true}) {
    check_sync_batch_norm("ref", relu);
    for (const std::string& name : testable_backends()) check_sync_batch_norm(name, relu);
  }
}

BOOST_DATA_TEST_CASE(relu_and_add_match_reference, bdata::make(testable_backends()), name) {
  Pair p(name);
  Shape shape{2, 16, 3, 3};
  Tensor x[2], y[2], dy[2], dx[2], a[2], s[2], sr[2];
  for (int i = 0; i < 2; ++i) {
    Backend& be = p.be(i);
    x[i] = random_tensor(be, shape, 61);
    auto relu = be.make_relu();
    relu->forward(x[i], y[i]);
    dy[i] = random_tensor(be, shape, 62);
    relu->backward(y[i], dy[i], dx[i]);
    a[i] = random_tensor(be, shape, 63);
    be.make_add(false)->forward(x[i], a[i], s[i]);
    be.make_add(true)->forward(x[i], a[i], sr[i]);
  }
  expect_close("relu forward", *p.cpu, y[0], *p.ref, y[1], 0);
  expect_close("relu backward", *p.cpu, dx[0], *p.ref, dx[1], 0);
  expect_close("add", *p.cpu, s[0], *p.ref, s[1], 0);
  expect_close("add + relu", *p.cpu, sr[0], *p.ref, sr[1], 0);
}

// A conv's output as the backend lays it out (oneDNN: channel-blocked, 24 channels padded
// to 32; cuda in 16 bits: channels last), so the fused ReLU backward reads real layouts.
Tensor conv_output(Backend& be, const Shape& x_shape, int out_c, uint64_t seed) {
  ConvSpec s;
  s.in_channels = int(x_shape[1]);
  s.out_channels = out_c;
  s.padding = 1;
  s.bias = false;
  Tensor x = random_tensor(be, x_shape, seed), y;
  Tensor w = random_tensor(be, {out_c, s.in_channels, 3, 3}, seed + 1, -0.3f, 0.3f);
  be.make_conv(s)->forward(x, w, nullptr, y);
  return y;
}

// The fast backends in each precision they take: cpu in fp32 and bf16 (where make_backend
// takes it), cuda in all four where a GPU is.
std::vector<std::pair<std::string, Precision>> precision_cases() {
  std::vector<std::pair<std::string, Precision>> cases{{"cpu", Precision::kF32},
                                                       {"cpu", Precision::kBF16}};
  if (cuda_testable())
    for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kF16, Precision::kTF32})
      cases.push_back({"cuda", p});
  return cases;
}

// A convolution that adds a residual (ConvSpec::accumulate: inference, the residual handed in
// y in any layout) gives the convolution, then the addition and the ReLU, as the reference
// computes them in fp32. The residual comes plain from the host, or as the backend lays out
// its own conv outputs (blocked on oneDNN, channels last in 16 bits on cuda). Each op runs two
// passes with different residuals, as predict runs batches (cuda keeps the last one).
void check_conv_residual(Backend& be, Precision precision, bool bias, bool relu, bool own_layout) {
  const Shape x_shape{2, 16, 7, 7};
  const int out_c = 24;
  ConvSpec s{16, out_c, 3, 1, 1, bias, relu};
  s.inference = true;
  s.accumulate = true;
  auto ref = make_backend("ref", 1);
  // The 16-bit and tf32 tolerances are mixed_precision's (relative to the largest value).
  const double tol = precision == Precision::kF32    ? kTol
                     : precision == Precision::kBF16 ? 2e-2
                                                     : 4e-3;
  const std::string what =
      str(be.name(), " ", precision_name(precision), ", bias ", bias, ", relu ", relu,
          own_layout ? ", residual in the backend's layout" : ", plain residual");
  std::printf("conv + residual: %s\n", what.c_str());
  const Shape w_shape{out_c, 16, 3, 3};
  const std::vector<float> hx = random_values(size_t(shape_numel(x_shape)), 91);
  const std::vector<float> hw = random_values(size_t(shape_numel(w_shape)), 92, -0.2f, 0.2f);
  const std::vector<float> hb = random_values(size_t(out_c), 93);
  Tensor x = to_device(be, x_shape, hx), w = to_device(be, w_shape, hw);
  Tensor b = to_device(be, {out_c}, hb);
  auto op = be.make_conv(s);
  ConvSpec plain_spec{16, out_c, 3, 1, 1, bias, false};
  Tensor rx = to_device(*ref, x_shape, hx), rw = to_device(*ref, w_shape, hw);
  Tensor rb = to_device(*ref, {out_c}, hb), rconv;
  ref->make_conv(plain_spec)->forward(rx, rw, bias ? &rb : nullptr, rconv);
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t seed = 94 + 10 * uint64_t(pass);
    Tensor y = own_layout ? conv_output(be, {2, 8, 7, 7}, out_c, seed)
                          : random_tensor(be, {2, out_c, 7, 7}, seed);
    const std::vector<float> residual = to_host(be, y);
    op->forward(x, w, bias ? &b : nullptr, y);
    Tensor want;
    ref->make_add(relu)->forward(rconv, to_device(*ref, rconv.shape(), residual), want);
    expect_close(what + ", pass " + std::to_string(pass + 1), be, y, *ref, want, tol);
    if (!relu) continue;
    const std::vector<float> out = to_host(*ref, want);
    const size_t cut = size_t(std::count(out.begin(), out.end(), 0.0f));
    BOOST_TEST((cut > out.size() / 5 && cut < out.size() * 4 / 5), what << ": ReLU cut " << cut);
  }
  std::printf("  %s\n", be.op_choices().c_str());
}

// Equal bits, or both zeros: which sign a masked gradient's zero has is each library's choice
// (oneDNN multiplies dy by the 0 or 1 of the mask: -0 where dy < 0; the ref loops write +0).
bool same_bits_or_zeros(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0 || (a == 0.0f && b == 0.0f);
}

// ReluOp::backward_of_sum gives, bit for bit (zeros' signs aside), what an add and a ReLU backward
// give, and what the formula gives: dx = a + b (rounded to bf16 in bf16) where y > 0, else 0. y is
// the ReLU of a conv output, a another conv output, b a plain tensor (a reorder on oneDNN).
BOOST_AUTO_TEST_CASE(relu_backward_of_a_sum_is_the_add_then_the_relu_backward_bitwise) {
  std::vector<std::pair<std::string, Precision>> cases{
      {"ref", Precision::kF32}, {"ref", Precision::kBF16}, {"cpu", Precision::kF32}};
  cases.push_back({"cpu", Precision::kBF16});  // where the CPU has bf16 (make_backend says)
  if (cuda_testable()) {
    cases.push_back({"cuda", Precision::kF32});
    cases.push_back({"cuda", Precision::kBF16});
  }
  const Shape x_shape{2, 5, 6, 6};
  for (const auto& [name, precision] : cases) {
    auto be = backend_or_skip("relu backward of a sum", name, precision);
    if (!be) continue;
    const bool bf16 = precision == Precision::kBF16;
    Tensor z = conv_output(*be, x_shape, 24, 81), a = conv_output(*be, x_shape, 24, 83);
    Tensor b = random_tensor(*be, z.shape(), 85), y, sum, unfused, fused;
    auto relu = be->make_relu();
    relu->forward(z, y);
    be->make_add(false)->forward(a, b, sum);
    relu->backward(y, sum, unfused);
    relu->backward_of_sum(y, a, b, fused);
    const std::vector<float> hy = to_host(*be, y), ha = to_host(*be, a), hb = to_host(*be, b);
    const std::vector<float> got = to_host(*be, fused), before = to_host(*be, unfused);
    size_t masked = 0, wrong = 0;
    for (size_t i = 0; i < hy.size(); ++i) {
      const float s = bf16 ? round_to_bf16(ha[i] + round_to_bf16(hb[i])) : ha[i] + hb[i];
      masked += hy[i] == 0;
      wrong += !same_bits_or_zeros(got[i], hy[i] > 0 ? s : 0.0f);
    }
    std::printf("relu backward of a sum, %s %s: %zu of %zu masked\n", name.c_str(),
                bf16 ? "bf16" : "fp32", masked, hy.size());
    BOOST_TEST(masked > hy.size() / 4);  // the mask is exercised both ways
    BOOST_TEST(masked < hy.size() * 3 / 4);
    BOOST_TEST(wrong == 0u, name << ": " << wrong << " values differ from the formula");
    size_t apart = 0;
    for (size_t i = 0; i < got.size(); ++i) apart += !same_bits_or_zeros(got[i], before[i]);
    BOOST_TEST(apart == 0u, name << ": fused and separate differ in " << apart << " values");
  }
}

BOOST_AUTO_TEST_CASE(conv_with_a_residual_is_the_conv_then_the_add) {
  int ran = 0;
  for (const auto& [name, precision] : precision_cases()) {
    auto be = backend_or_skip("conv + residual", name, precision);
    if (!be) continue;
    BOOST_TEST_REQUIRE(be->fuses_conv_residual(), name);
    for (bool own_layout : {false, true}) {
      check_conv_residual(*be, precision, true, true, own_layout);
      check_conv_residual(*be, precision, false, false, own_layout);
    }
    check_conv_residual(*be, precision, true, false, true);
    check_conv_residual(*be, precision, false, true, true);
    ++ran;
  }
  BOOST_TEST(ran >= 1);
}

BOOST_DATA_TEST_CASE(pools_match_reference, bdata::make(testable_backends()), name) {
  check_pool(name, {PoolKind::kMax, 2, 2, 0, false}, {2, 3, 8, 8}, 71);
  check_pool(name, {PoolKind::kMax, 3, 2, 1, false}, {2, 16, 7, 7}, 72);
  check_pool(name, {PoolKind::kAvg, 2, 2, 0, false}, {2, 16, 6, 6}, 73);
  check_pool(name, {PoolKind::kAvg, 3, 2, 1, false}, {2, 3, 7, 7}, 74);
  check_pool(name, {PoolKind::kAvg, 1, 1, 0, true}, {2, 32, 4, 4}, 75);
}

// Overlapping max windows (3x3, stride 2) send one input's gradient from up to four
// windows. cuDNN's CUDNN_POOLING_MAX adds them with atomics in no fixed order, so two runs
// could differ in the last bits; the deterministic mode (and the CPU loops) may not.
BOOST_DATA_TEST_CASE(max_pool_backward_is_repeatable, bdata::make(testable_backends()), name) {
  auto be = make_backend(name, 2);
  // Few distinct values: many windows share their maximum, so many gradients meet.
  std::vector<float> xv = random_values(size_t(8) * 64 * 33 * 33, 76, 0.0f, 4.0f);
  for (float& v : xv) v = std::floor(v);
  Tensor x = to_device(*be, {8, 64, 33, 33}, xv), y, dx;
  auto op = be->make_pool({PoolKind::kMax, 3, 2, 1, false});
  op->forward(x, y, true);
  Tensor dy = random_tensor(*be, y.shape(), 77);
  std::vector<float> first;
  size_t runs_differing = 0;
  for (int run = 0; run < 5; ++run) {
    op->backward(dy, dx);
    std::vector<float> got = to_host(*be, dx);
    if (run == 0) first = got;
    runs_differing += std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) != 0;
  }
  BOOST_TEST(runs_differing == 0u, name << ": " << runs_differing << " of 4 reruns differ");
}

// The inspection heads' loss: the mean of -t log s(z) - (1-t) log(1-s(z)) over all values and
// dz = w (s(z) - t) / count, on every backend; logits of +-100 (where s(z) rounds to 0 or 1)
// give the exact finite loss, not inf; cpu equals ref bit for bit (one host loop).
BOOST_AUTO_TEST_CASE(sigmoid_binary_cross_entropy_matches_direct_formula) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  std::vector<float> z = random_values(4 * 3, 91, -3, 3);
  z[4] = 100.0f;
  z[7] = -100.0f;
  std::vector<float> t{1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0};
  double want_loss = 0;
  std::vector<float> want_dz(12);
  for (size_t i = 0; i < 12; ++i) {
    const double zi = z[i], p = 1 / (1 + std::exp(-zi));
    // log(1 + e^z) - z t, written to stay finite at |z| = 100 in double.
    want_loss += (zi > 0 ? zi + std::log1p(std::exp(-zi)) : std::log1p(std::exp(zi))) - zi * t[i];
    want_dz[i] = float(0.5 * (p - t[i]) / 12);
  }
  want_loss /= 12;
  std::vector<float> ref_dz;
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    Tensor logits = to_device(*be, {4, 3}, z), dz;
    const double loss = be->sigmoid_binary_cross_entropy(logits, t.data(), 0.5f, dz);
    BOOST_TEST(loss == want_loss, boost::test_tools::tolerance(1e-12));
    expect_close(name + " sigmoid BCE gradient", to_host(*be, dz), want_dz, 1e-7);
    if (name == "ref") ref_dz = to_host(*be, dz);
    std::vector<float> bad = t;
    bad[5] = 2.0f;
    try {
      be->sigmoid_binary_cross_entropy(logits, bad.data(), 1.0f, dz);
      BOOST_FAIL(name << ": no throw");
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.what()).find("binary target 2 of value 5 is outside [0, 1]") !=
                 std::string::npos);
    }
  }
  auto cpu = make_backend("cpu", 2);
  Tensor logits = to_device(*cpu, {4, 3}, z), dz;
  cpu->sigmoid_binary_cross_entropy(logits, t.data(), 0.5f, dz);
  BOOST_TEST(to_host(*cpu, dz) == ref_dz);
}

BOOST_AUTO_TEST_CASE(loss_and_sgd_match_direct_formulas) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    std::vector<float> z = random_values(3 * 4, 81, -2, 2);
    int32_t labels[3] = {2, 0, 3};
    Tensor logits = to_device(*be, {3, 4}, z), dz;
    LossResult r = be->softmax_cross_entropy(logits, labels, dz, 0.0f);
    double loss = 0;
    int64_t correct = 0;
    std::vector<float> want(12);
    for (int i = 0; i < 3; ++i) {
      double total = 0;
      int best = 0;
      for (int k = 0; k < 4; ++k) total += std::exp(double(z[i * 4 + k]));
      for (int k = 0; k < 4; ++k) best = z[i * 4 + k] > z[i * 4 + best] ? k : best;
      correct += best == labels[i];
      loss -= std::log(std::exp(double(z[i * 4 + labels[i]])) / total);
      for (int k = 0; k < 4; ++k)
        want[i * 4 + k] = float((std::exp(double(z[i * 4 + k])) / total - (k == labels[i])) / 3);
    }
    BOOST_TEST(r.loss == loss / 3, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(r.correct == correct);
    BOOST_TEST(r.count == 3);
    expect_close(std::string(name) + " softmax cross-entropy gradient", to_host(*be, dz), want,
                 1e-6);
    int32_t bad[3] = {2, 4, 0};
    try {
      be->softmax_cross_entropy(logits, bad, dz, 0.0f);
      BOOST_FAIL("no throw");
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.what()).find("label 4 of image 1 is outside [0, 4)") !=
                 std::string::npos);
    }

    for (bool nesterov : {false, true}) {
      std::vector<float> w = random_values(37, 82), g = random_values(37, 83),
                         m = random_values(37, 84);
      Tensor wt = to_device(*be, {37}, w), gt = to_device(*be, {37}, g),
             mt = to_device(*be, {37}, m);
      SgdSpec s{0.1f, 0.9f, 5e-4f, nesterov};
      be->sgd_update(wt, gt, mt, s);
      std::vector<float> w_want(37), m_want(37);
      for (int i = 0; i < 37; ++i) {
        float d = g[i] + s.weight_decay * w[i];
        m_want[i] = s.momentum * m[i] + d;
        w_want[i] = w[i] - s.lr * (nesterov ? d + s.momentum * m_want[i] : m_want[i]);
      }
      expect_close(std::string(name) + (nesterov ? " sgd nesterov w" : " sgd w"), to_host(*be, wt),
                   w_want, 1e-6);
      expect_close(std::string(name) + " sgd momentum", to_host(*be, mt), m_want, 1e-6);
    }
  }
}

// sgd_update_many is sgd_update on each tensor, bitwise: tensors of 1 to 70,001 values with
// their own weight decays, three steps at changing learning rates (cuda keeps the tensors'
// table on the device between calls), then a different list (a new table).
BOOST_AUTO_TEST_CASE(sgd_update_many_is_sgd_update_on_each_bitwise) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    for (bool nesterov : {false, true}) {
      const std::vector<int64_t> sizes{1, 37, 1000, 70001};
      const std::vector<float> decays{0.0f, 5e-4f, 1e-3f, 0.0f};
      struct Set {
        std::vector<Tensor> w, g, m;
      } many, each;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const uint64_t seed = 100 + 3 * i;
        for (Set* set : {&many, &each}) {
          set->w.push_back(to_device(*be, {sizes[i]}, random_values(size_t(sizes[i]), seed)));
          set->g.push_back(to_device(*be, {sizes[i]}, random_values(size_t(sizes[i]), seed + 1)));
          set->m.push_back(to_device(*be, {sizes[i]}, random_values(size_t(sizes[i]), seed + 2)));
        }
      }
      auto step = [&](const std::vector<size_t>& which, float lr) {
        std::vector<SgdTensors> list;
        for (size_t i : which) {
          list.push_back({&many.w[i], &many.g[i], &many.m[i], decays[i]});
          be->sgd_update(each.w[i], each.g[i], each.m[i], {lr, 0.9f, decays[i], nesterov});
        }
        be->sgd_update_many(list, {lr, 0.9f, 0.25f /* not read */, nesterov});
      };
      for (float lr : {0.1f, 0.05f, 0.025f}) step({0, 1, 2, 3}, lr);
      step({3, 1}, 0.2f);
      for (size_t i = 0; i < sizes.size(); ++i) {
        const std::string what =
            name + (nesterov ? " nesterov" : "") + " tensor " + std::to_string(i);
        const std::vector<float> w_many = to_host(*be, many.w[i]), w_each = to_host(*be, each.w[i]);
        const std::vector<float> m_many = to_host(*be, many.m[i]), m_each = to_host(*be, each.m[i]);
        BOOST_TEST(same_bits(w_many, w_each), what << ": weights differ");
        BOOST_TEST(same_bits(m_many, m_each), what << ": momentum differs");
      }
    }
  }
}

// axpby_pair is the two axpby calls, bitwise (cuda: one launch for both, of unequal sizes as
// the test has them; a batch norm's running statistics are equal).
BOOST_AUTO_TEST_CASE(axpby_pair_is_two_axpby_bitwise) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    const std::vector<float> x = random_values(300, 61), u = random_values(1025, 62);
    const std::vector<float> y = random_values(300, 63), v = random_values(1025, 64);
    Tensor xt = to_device(*be, {300}, x), ut = to_device(*be, {1025}, u);
    Tensor y_pair = to_device(*be, {300}, y), v_pair = to_device(*be, {1025}, v);
    Tensor y_each = to_device(*be, {300}, y), v_each = to_device(*be, {1025}, v);
    be->axpby_pair(0.1f, xt, 0.9f, y_pair, 0.1f * 1.0039f, ut, 0.9f, v_pair);
    be->axpby(0.1f, xt, 0.9f, y_each);
    be->axpby(0.1f * 1.0039f, ut, 0.9f, v_each);
    for (auto [got, want] : {std::pair{&y_pair, &y_each}, std::pair{&v_pair, &v_each}}) {
      const std::vector<float> g = to_host(*be, *got), w = to_host(*be, *want);
      BOOST_TEST(same_bits(g, w),
                 name << ": axpby_pair differs from axpby on " << w.size() << " values");
    }
    std::vector<float> want_v(1025);
    for (size_t i = 0; i < want_v.size(); ++i) want_v[i] = 0.1f * 1.0039f * u[i] + 0.9f * v[i];
    expect_close(name + " axpby_pair v", to_host(*be, v_pair), want_v, 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(fill_copy_scale_axpby_and_views) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    std::vector<float> xv = random_values(10, 91), yv = random_values(10, 92);
    Tensor x = to_device(*be, {10}, xv), y = to_device(*be, {10}, yv), c;
    be->axpby(2.0f, x, -1.0f, y);
    be->copy(y, c);
    be->scale(c, 0.5f);
    std::vector<float> want(10);
    for (int i = 0; i < 10; ++i) want[i] = (2.0f * xv[i] - yv[i]) * 0.5f;
    expect_close(std::string(name) + " axpby, copy, scale", to_host(*be, c), want, 0);
    // A view of memory the backend can reach (device memory on a GPU) that another owns.
    Tensor external = to_device(*be, {10}, std::vector<float>(10, 7.0f));
    Tensor v = Tensor::view(external.f32(), {10});
    BOOST_TEST(v.is_view());
    be->fill(v, -3.0f);
    BOOST_TEST(to_host(*be, external)[9] == -3.0f);
  }
}

namespace {

// Reads backend memory the way the fusion engine's comm thread does (NCCL, a staging copy):
// not through the backend, whose download() would wait for its own stream, so that nothing
// but the ready mark orders the read after the backend's work.
std::vector<float> read_behind_backend([[maybe_unused]] const std::string& name, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
#if RINGTRAIN_HAS_CUDA
  if (name == "cuda") {
    // On the legacy default stream, which the backend's non-blocking stream does not wait
    // for nor make wait.
    BOOST_REQUIRE(cudaMemcpy(out.data(), t.f32(), out.size() * sizeof(float),
                             cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
#endif
  std::memcpy(out.data(), t.f32(), out.size() * sizeof(float));
  return out;
}

}  // namespace

// What the fusion engine needs of a GPU backend besides memory: a ready mark that another
// thread waits on before it reads what the ops issued before the mark wrote.
//
// The reader reads behind the backend's back (read_behind_backend), after wait_ready only.
// On cuda, 100 scalings of 128 MiB queue tens of milliseconds of GPU work in well under one;
// if record_ready/wait_ready did nothing, the reader's copy would run while they still do
// and see an earlier pass's values (x * 2^k, k < 100), and this test fails. (An earlier
// version read back through download(), which synchronises by itself: it passed with marks
// that did nothing.) On cpu and ref the marks do nothing by design because every op has
// finished when it returns: the same check then holds that contract, which a CPU backend
// made asynchronous without real marks would break.
BOOST_AUTO_TEST_CASE(ready_marks_order_a_reader_on_another_thread) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    const size_t n = name == "cuda" ? size_t(32) << 20 : size_t(1) << 16;
    std::vector<float> xv(n);
    for (size_t i = 0; i < n; ++i) xv[i] = float(i % 7 + 1);  // position-dependent
    Tensor x = to_device(*be, {int64_t(n)}, xv);
    const int passes = 100;
    for (int pass = 0; pass < passes; ++pass) be->scale(x, 2.0f);
    be->record_ready(3);
    std::vector<float> got;
    std::thread reader([&] {
      be->wait_ready(3);
      got = read_behind_backend(name, x);
    });
    reader.join();
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += got[i] != std::ldexp(xv[i], passes);
    BOOST_TEST(wrong == 0u, name << ": the reader saw " << wrong << " of " << n
                                 << " values before the last of " << passes << " scalings");
  }
}

BOOST_DATA_TEST_CASE(download_of_blocked_layout_is_plain, bdata::make(testable_backends()), name) {
  Pair p(name);
  Tensor x[2], w[2], y[2];
  for (int i = 0; i < 2; ++i) {
    x[i] = random_tensor(p.be(i), {1, 16, 5, 5}, 95);
    w[i] = random_tensor(p.be(i), {32, 16, 3, 3}, 96);
    p.be(i).make_conv({16, 32, 3, 1, 1, false, false})->forward(x[i], w[i], nullptr, y[i]);
  }
  Tensor plain;
  p.cpu->copy(y[0], plain);
  BOOST_TEST(plain.is_plain());
  expect_close("copy of a blocked tensor", *p.cpu, plain, *p.ref, y[1], kTol);
}

// The trainer's non-finite check, on every backend: a NaN, +inf or -inf alone at the first,
// a middle or the last element of a tensor larger than one grid of the CUDA kernel (4096
// blocks x 256 threads: the last element is reached on the grid loop's third lap), and
// first_nonfinite naming the first poisoned tensor of several. On cuda this is the device
// path (one flag per tensor, one copy back); before it, cuda took Backend's default (a
// download and a host loop), which gives the same answers: this case guards the new
// path's correctness, it is not one that failed before.
std::vector<std::string> finite_check_backends() {
  std::vector<std::string> names{"ref"};
  for (const std::string& name : testable_backends()) names.push_back(name);
  return names;
}

BOOST_DATA_TEST_CASE(all_finite_finds_nan_and_inf_anywhere, bdata::make(finite_check_backends()),
                     name) {
  auto be = make_backend(name, 2);
  const int64_t n = 3 * 4096 * 256 + 17;
  const std::vector<float> clean = random_values(size_t(n), 31, -1e30f, 1e30f);
  Tensor small = random_tensor(*be, {7}, 32);
  Tensor big = to_device(*be, {n}, clean);
  Tensor other = to_device(*be, {n}, clean);
  BOOST_TEST(be->all_finite(big));
  BOOST_TEST(be->first_nonfinite({&small, &big, &other}) == 3u);
  BOOST_TEST(be->first_nonfinite({}) == 0u);
  const float bad[3] = {std::nanf(""), INFINITY, -INFINITY};
  for (int64_t at : {int64_t(0), n / 2, n - 1})
    for (float value : bad) {
      std::vector<float> poisoned = clean;
      poisoned[size_t(at)] = value;
      be->upload(poisoned.data(), big);
      be->upload(poisoned.data(), other);
      BOOST_TEST(!be->all_finite(big), name << ": " << value << " at " << at);
      BOOST_TEST(be->first_nonfinite({&small, &big, &other}) == 1u,
                 name << ": " << value << " at " << at);
      BOOST_TEST(be->first_nonfinite({&small, &other}) == 1u);
      BOOST_TEST(be->all_finite(small));
    }
}

BOOST_AUTO_TEST_CASE(unknown_and_unbuilt_backends_are_input_errors) {
  try {
    make_backend("tpu", 1);
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == "unknown backend 'tpu': known backends are cpu, ref, cuda");
  }
  // make_backend("cuda") without CUDA or without a GPU: test_cuda_backend.cpp.
}

// Label smoothing by hand: logits (0, ln 3) give p = (1/4, 3/4); label 1 smoothed by 0.2 over
// 2 classes is t = (0.1, 0.9): loss -(0.1 ln 1/4 + 0.9 ln 3/4) = 0.39754330, dlogits p - t =
// (0.15, -0.15). A second image, logits (ln 3, 0) with label 1: p = (3/4, 1/4), t = (0.1, 0.9),
// loss -(0.1 ln 3/4 + 0.9 ln 1/4) = 1.27643313, dlogits (0.65, -0.65); the batch of both halves
// the gradients and averages the losses. Smoothing 0 is the plain loss.
BOOST_AUTO_TEST_CASE(smoothed_loss_and_gradient_match_hand_formulas) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  const float ln3 = float(std::log(3.0));
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    Tensor logits = to_device(*be, {2, 2}, {0, ln3, ln3, 0}), dz;
    int32_t labels[2] = {1, 1};
    LossResult r = be->softmax_cross_entropy(logits, labels, dz, 0.2f);
    BOOST_TEST(r.loss == (0.39754330 + 1.27643313) / 2, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(r.correct == 1);
    expect_close(name + " smoothed gradient", to_host(*be, dz), {0.075f, -0.075f, 0.325f, -0.325f},
                 1e-6);
    r = be->softmax_cross_entropy(logits, labels, dz, 0.0f);
    BOOST_TEST(r.loss == (std::log(4.0 / 3) + std::log(4.0)) / 2,
               boost::test_tools::tolerance(1e-6));
    expect_close(name + " plain gradient", to_host(*be, dz), {0.125f, -0.125f, 0.375f, -0.375f},
                 1e-6);
  }
}

// One step of each adaptive rule on w = (3, 0, 4), g = (0.6, 0.8, 0), weight decay 0.1, against
// the formulas worked by hand (nn/optimizer.hpp): |w| = 5, |g| = 1. LARS, eta 0.001, lr 1:
// trust = 0.005 / 1.5, m = lr trust (g + 0.1 w), w - m; a second step with the same g. LAMB and
// AdamW at step 1, lr 0.1: mhat / sqrt(vhat) = sign(g) = (1, 1, 0); LAMB's r = (1.3, 1, 0.4),
// trust = 5 / |r| = 5 / sqrt(2.85); AdamW w - 0.1 (sign(g) + 0.1 w). Without the trust ratio
// (BN, biases: layer_adaptation off) LARS is momentum SGD.
BOOST_AUTO_TEST_CASE(update_rules_match_hand_computed_steps) {
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  const std::vector<float> w0 = {3, 0, 4}, g0 = {0.6f, 0.8f, 0};
  for (const std::string& name : names) {
    auto be = make_backend(name, 2);
    auto step = [&](UpdateRule rule, float lr, bool adapt, int steps) {
      Tensor w = to_device(*be, {3}, w0), g = to_device(*be, {3}, g0);
      Tensor m = to_device(*be, {3}, {0, 0, 0}), v = to_device(*be, {3}, {0, 0, 0});
      AdaptiveSpec spec;
      spec.rule = rule, spec.lr = lr, spec.weight_decay = adapt ? 0.1f : 0.0f;
      spec.layer_adaptation = adapt;
      for (spec.step = 1; spec.step <= steps; ++spec.step)
        be->adaptive_update(w, g, m, rule == UpdateRule::kLars ? nullptr : &v, spec);
      return to_host(*be, w);
    };
    expect_close(name + " LARS, one step", step(UpdateRule::kLars, 1, true, 1),
                 {2.997f, -0.0026666667f, 3.9986667f}, 1e-6);
    expect_close(name + " LARS, two steps", step(UpdateRule::kLars, 1, true, 2),
                 {2.9913021f, -0.0077314257f, 3.9961343f}, 1e-6);
    // Without adaptation or decay: m = 0.6, 0.8, 0 then 0.9 m + g; w -= m each time.
    expect_close(name + " LARS, BN/bias rule", step(UpdateRule::kLars, 1, false, 2),
                 {3 - 0.6f - 1.14f, -0.8f - 1.52f, 4}, 1e-6);
    expect_close(name + " LAMB, one step", step(UpdateRule::kLamb, 0.1f, true, 1),
                 {2.6149732f, -0.29617444f, 3.8815302f}, 1e-6);
    expect_close(name + " AdamW, one step", step(UpdateRule::kAdamW, 0.1f, true, 1),
                 {2.87f, -0.1f, 3.96f}, 1e-6);
  }
}

// The norms behind the trust ratios and clipping: the same bits at every thread count, and the
// sum of the squares to fp64 rounding.
BOOST_AUTO_TEST_CASE(sum_of_squares_is_exact_and_the_same_at_any_thread_count) {
  std::vector<float> x = random_values(100003, 91, -1, 1);
  double want = 0;
  for (float v : x) want += double(v) * v;
  std::vector<std::string> names = testable_backends();
  names.push_back("ref");
  for (const std::string& name : names) {
    double first = 0;
    for (int threads : {1, 2, 3}) {
      auto be = make_backend(name, threads);
      Tensor t = to_device(*be, {100003}, x), one = to_device(*be, {1}, {2});
      const double got = be->sum_of_squares({&t, &one});
      if (threads == 1) first = got;
      BOOST_TEST(got == first, name << " at " << threads << " threads");
      BOOST_TEST(got == want + 4, name << boost::test_tools::tolerance(1e-12));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
