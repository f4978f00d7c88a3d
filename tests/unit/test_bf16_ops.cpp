// test_bf16_ops.cpp — the cpu backend's bf16 ops, forward and backward, against the bf16
// reference (ref loops, activations rounded to bf16) and against fp32, max differences printed.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "nn_test_util.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/bf16.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// Tolerances, relative to the largest value of the fp32 result (rt_test::expect_close):
// against the bf16 reference both sides store the same roundings, and differ only where the
// order of the fp32 accumulation moves a value across a bf16 rounding boundary (an output
// then differs by one bf16 step, 2^-8 of itself, and the error carries into what reads it).
constexpr double kVsBf16Reference = 1.6e-2;
// Against fp32: the inputs' own bf16 rounding (2^-9 relative each), summed over the
// products of one output.
constexpr double kVsFp32 = 3e-2;

// The cpu backend in bf16, or null (with the reason printed) on a CPU without AVX512-BF16 or
// AMX, where make_backend refuses bf16 by design.
std::unique_ptr<Backend> cpu_bf16() {
  try {
    return make_backend("cpu", 2, Precision::kBF16);
  } catch (const InputError& e) {
    std::printf("bf16 ops: skipped: %s\n", e.what());
    return nullptr;
  }
}

// The three backends an op runs on: cpu bf16 (under test), the bf16 reference, fp32 ref.
struct Trio {
  std::unique_ptr<Backend> be[3];
  bool ok() const { return be[0] != nullptr; }
  Trio()
      : be{cpu_bf16(), make_backend("ref", 2, Precision::kBF16),
           make_backend("ref", 2, Precision::kF32)} {}
};

// An activation (an op's x or dy) as the backend stores it: bf16 on the cpu bf16 backend,
// fp32 on the references (which round what they read).
Tensor activation(Backend& be, const Shape& shape, uint64_t seed, float lo = -1, float hi = 1) {
  if (be.name() != "cpu") return random_tensor(be, shape, seed, lo, hi);
  Tensor t = be.alloc(shape, DType::kBF16);
  std::vector<float> v = random_values(size_t(shape_numel(shape)), seed, lo, hi);
  be.upload(v.data(), t);
  return t;
}

// Compares what `run` computed on the three backends: outputs[i][k] is output k of backend i.
// Outputs the cpu path stores in bf16 must hold bf16 values (an fp32 path would not).
void expect_bf16_values(const std::string& what, Backend& be, const Tensor& t) {
  std::vector<float> v = to_host(be, t);
  size_t off = 0;
  for (float x : v) off += round_to_bf16(x) != x;
  BOOST_TEST(off == 0u, what << ": " << off << " of " << v.size() << " values are not bf16");
}

// Outputs named in `masked` are compared with the bf16 reference only: a ReLU mask can flip
// where rounding the inputs moves a sum across zero (a = 0.50001, b = -0.5), so such a
// gradient differs from fp32's by whole values at those elements, by design.
void compare(const std::string& op, Trio& t, const std::vector<std::string>& names,
             const std::vector<std::vector<Tensor>>& outputs,
             const std::vector<std::string>& masked = {}) {
  for (size_t k = 0; k < names.size(); ++k) {
    // Activations and their gradients are stored in bf16; weight gradients, statistics and
    // the linear layer's fp32 logits ("y" of linear) are not.
    const std::string& n = names[k];
    const bool stored_bf16 =
        (n == "y" && op != "linear") || n == "dx" || n == "sum" || n == "y (inference)";
    if (stored_bf16) expect_bf16_values(op + " " + n + " stored in bf16", *t.be[0], outputs[0][k]);
    expect_close(op + " " + names[k] + " vs bf16 ref", *t.be[0], outputs[0][k], *t.be[1],
                 outputs[1][k], kVsBf16Reference);
    if (std::find(masked.begin(), masked.end(), names[k]) != masked.end()) continue;
    expect_close(op + " " + names[k] + " vs fp32", *t.be[0], outputs[0][k], *t.be[2], outputs[2][k],
                 kVsFp32);
  }
}

// The cosine of the angle between two whole gradients: 1 when they point the same way.
double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

void check_conv(const ConvSpec& s, const Shape& x_shape, uint64_t seed) {
  Trio t;
  if (!t.ok()) return;
  std::printf("bf16 conv %d->%d k%d s%d p%d relu %d, x %s\n", s.in_channels, s.out_channels,
              s.kernel, s.stride, s.padding, s.fuse_relu, shape_str(x_shape).c_str());
  Shape w_shape{s.out_channels, s.in_channels, s.kernel, s.kernel};
  std::vector<std::vector<Tensor>> out(3);
  for (int i = 0; i < 3; ++i) {
    Backend& be = *t.be[i];
    Tensor x = activation(be, x_shape, seed), w = random_tensor(be, w_shape, seed + 1, -.3f, .3f);
    Tensor b = random_tensor(be, {s.out_channels}, seed + 2), y, dx;
    auto op = be.make_conv(s);
    op->forward(x, w, s.bias ? &b : nullptr, y);
    Tensor dy = activation(be, y.shape(), seed + 3);
    Tensor dw = be.alloc(w_shape), db = be.alloc({s.out_channels});
    op->backward_weights(x, dy, dw, s.bias ? &db : nullptr);
    op->backward_data(dy, w, dx);
    out[i] = {y, dw, dx, db};
  }
  compare("conv", t,
          s.bias ? std::vector<std::string>{"y", "dw", "dx", "dbias"}
                 : std::vector<std::string>{"y", "dw", "dx"},
          out);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bf16_ops)

// The reference's storage: round to nearest even, ties to even, NaN kept.
BOOST_AUTO_TEST_CASE(reference_rounds_to_nearest_even) {
  BOOST_TEST(round_to_bf16(1.0f + 0x1p-8f) == 1.0f);                       // a tie: to even (1.0)
  BOOST_TEST(round_to_bf16(1.0f + 0x1p-7f + 0x1p-8f) == 1.0f + 0x1p-6f);   // a tie: to even
  BOOST_TEST(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f);  // above half: up
  BOOST_TEST(std::isnan(round_to_bf16(std::nanf(""))));
  auto ref = make_backend("ref", 1, Precision::kBF16);
  BOOST_TEST(std::string(precision_name(ref->precision())) == "bf16");
  Tensor x = to_device(*ref, {1, 1, 1, 4}, {1.0f + 0x1p-8f, -3.0f + 0x1p-9f, 0.1f, 2.5f});
  Tensor y;
  auto relu = ref->make_relu();
  relu->forward(x, y);
  std::vector<float> got = to_host(*ref, y);
  BOOST_TEST((got == std::vector<float>{1.0f, 0.0f, round_to_bf16(0.1f), 2.5f}));
}

BOOST_AUTO_TEST_CASE(conv_matches_the_bf16_reference) {
  check_conv({3, 8, 3, 1, 1, true, false}, {2, 3, 9, 9}, 31);
  check_conv({16, 32, 3, 2, 1, false, false}, {2, 16, 9, 9}, 32);
  check_conv({32, 64, 3, 1, 1, true, true}, {2, 32, 7, 7}, 33);
  check_conv({16, 32, 1, 2, 0, false, false}, {2, 16, 8, 8}, 34);
}

BOOST_AUTO_TEST_CASE(linear_matches_the_bf16_reference) {
  for (const Shape& x_shape : {Shape{5, 24}, Shape{3, 32, 2, 3}}) {
    Trio t;
    if (!t.ok()) return;
    std::printf("bf16 linear, x %s\n", shape_str(x_shape).c_str());
    const int64_t f = shape_numel(x_shape) / x_shape[0];
    std::vector<std::vector<Tensor>> out(3);
    for (int i = 0; i < 3; ++i) {
      Backend& be = *t.be[i];
      Tensor x = activation(be, x_shape, 41), w = random_tensor(be, {7, f}, 42);
      Tensor b = random_tensor(be, {7}, 43), y, dx;
      auto op = be.make_linear({f, 7, true});
      op->forward(x, w, &b, y);
      Tensor dy = activation(be, {x_shape[0], 7}, 44);
      Tensor dw = be.alloc({7, f}), db = be.alloc({7});
      op->backward_weights(x, dy, dw, &db);
      op->backward_data(dy, w, dx);
      out[i] = {y, dw, dx, db};
    }
    compare("linear", t, {"y", "dw", "dx", "dbias"}, out);
  }
}

// x plain (oneDNN's batch norm on the cpu) and in the blocked layout a convolution writes (the
// cpu's own passes, norm_passes.hpp).
BOOST_AUTO_TEST_CASE(batch_norm_matches_the_bf16_reference) {
  for (bool blocked : {false, true})
    for (bool relu : {false, true}) {
      Trio t;
      if (!t.ok()) return;
      std::printf("bf16 batch norm, relu %d, x %s\n", relu, blocked ? "blocked" : "plain");
      const Shape shape{4, 16, 5, 5};
      std::vector<float> xv = random_values(size_t(shape_numel(shape)), 51, -2, 3);
      for (float& v : xv) v = round_to_bf16(v);
      std::vector<std::vector<Tensor>> out(3);
      for (int i = 0; i < 3; ++i) {
        Backend& be = *t.be[i];
        Tensor x = i == 0 && blocked ? as_conv_output(be, shape, xv)
                   : i == 0          ? activation(be, shape, 51, -2, 3)
                                     : to_device(be, shape, xv);
        Tensor gamma = random_tensor(be, {16}, 52, 0.5f, 1.5f), beta = random_tensor(be, {16}, 53);
        Tensor y, mean, var, dx, y_eval;
        auto op = be.make_batch_norm({16, 1e-5f, relu});
        op->forward_training(x, gamma, beta, y, mean, var, nullptr);
        Tensor dy = activation(be, y.shape(), 54);
        Tensor dgamma = be.alloc({16}), dbeta = be.alloc({16});
        op->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, nullptr);
        op->forward_inference(x, gamma, beta, mean, var, y_eval);
        out[i] = {y, mean, var, dx, dgamma, dbeta, y_eval};
      }
      BOOST_TEST(t.be[0]->op_choices() ==
                 str("batch norm: own passes ", int(blocked), ", oneDNN ", int(!blocked)));
      compare("batch norm", t, {"y", "mean", "var", "dx", "dgamma", "dbeta", "y (inference)"}, out);
    }
}

// The cpu's fused loops (x in the blocked layout a convolution writes) against the references'
// batch norm then max pool; the tiles have no near-ties, so every backend pools the same values.
BOOST_AUTO_TEST_CASE(batch_norm_relu_max_pool_matches_the_bf16_reference) {
  Trio t;
  if (!t.ok()) return;
  const Shape shape{4, 16, 9, 8};
  std::vector<float> xv = tiles_without_ties(shape, 2, 56);
  for (float& v : xv) v = round_to_bf16(v);
  std::vector<std::vector<Tensor>> out(3);
  for (int i = 0; i < 3; ++i) {
    Backend& be = *t.be[i];
    Tensor x = i == 0 ? as_conv_output(be, shape, xv) : to_device(be, shape, xv);
    Tensor gamma = random_tensor(be, {16}, 57, 0.5f, 1.5f), beta = random_tensor(be, {16}, 58);
    Tensor y, mean, var, dx;
    auto op = be.make_norm_relu_max_pool({16, 1e-5f, 2});
    op->forward_training(x, gamma, beta, y, mean, var, nullptr);
    Tensor dy = activation(be, y.shape(), 59);
    Tensor dgamma = be.alloc({16}), dbeta = be.alloc({16});
    op->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, nullptr);
    out[i] = {y, mean, var, dx, dgamma, dbeta};
  }
  BOOST_TEST(t.be[0]->op_choices() == "batch norm + ReLU + max pool: fused 1, oneDNN 0");
  compare("batch norm + relu + max pool", t, {"y", "mean", "var", "dx", "dgamma", "dbeta"}, out);
}

// The cpu's fused batch norm + residual + ReLU pass (x and the residual in the blocked layout a
// convolution writes) against the references' batch norm then add, with each one's backward.
BOOST_AUTO_TEST_CASE(batch_norm_residual_relu_matches_the_bf16_reference) {
  Trio t;
  if (!t.ok()) return;
  const Shape shape{4, 16, 5, 6};
  std::vector<float> xv = random_values(size_t(shape_numel(shape)), 63, -1, 3);
  std::vector<float> rv = random_values(xv.size(), 64);
  for (float& v : xv) v = round_to_bf16(v);
  for (float& v : rv) v = round_to_bf16(v);
  std::vector<std::vector<Tensor>> out(3);
  for (int i = 0; i < 3; ++i) {
    Backend& be = *t.be[i];
    const Tensor x = i == 0 ? as_conv_output(be, shape, xv) : to_device(be, shape, xv);
    const Tensor r = i == 0 ? as_conv_output(be, shape, rv) : to_device(be, shape, rv);
    Tensor gamma = random_tensor(be, {16}, 65, 0.5f, 1.5f), beta = random_tensor(be, {16}, 66);
    Tensor y, normed, mean, var, masked, dx;
    auto op = be.make_batch_norm({16, 1e-5f, false});
    if (op->forward_training_add_relu(x, gamma, beta, r, y, mean, var, nullptr) == 0) {
      op->forward_training(x, gamma, beta, normed, mean, var, nullptr);
      be.make_add(true)->forward(normed, r, y);
    }
    Tensor dy = activation(be, y.shape(), 67);
    be.make_relu()->backward(y, dy, masked);
    Tensor dgamma = be.alloc({16}), dbeta = be.alloc({16});
    op->backward(x, masked, gamma, mean, var, dx, dgamma, dbeta, nullptr);
    out[i] = {y, mean, var, dx, dgamma, dbeta};
  }
  BOOST_TEST(t.be[0]->op_choices() == "batch norm + residual + ReLU: fused 1, oneDNN 0");
  compare("batch norm + residual + relu", t, {"y", "mean", "var", "dx", "dgamma", "dbeta"}, out,
          {"dx", "dgamma", "dbeta"});
}

BOOST_AUTO_TEST_CASE(relu_pool_and_add_match_the_bf16_reference) {
  Trio t;
  if (!t.ok()) return;
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    std::printf("bf16 pool %s\n", kind == PoolKind::kMax ? "max" : "avg");
    std::vector<std::vector<Tensor>> out(3);
    for (int i = 0; i < 3; ++i) {
      Backend& be = *t.be[i];
      Tensor x = activation(be, {2, 8, 8, 8}, 61), y, dx;
      auto op = be.make_pool({kind, 2, 2, 0, false});
      op->forward(x, y, true);
      Tensor dy = activation(be, y.shape(), 62);
      op->backward(dy, dx);
      out[i] = {y, dx};
    }
    compare("pool", t, {"y", "dx"}, out);
  }
  std::vector<std::vector<Tensor>> out(3);
  for (int i = 0; i < 3; ++i) {
    Backend& be = *t.be[i];
    Tensor a = activation(be, {2, 8, 4, 4}, 71), b = activation(be, {2, 8, 4, 4}, 72);
    Tensor sum, y, dx;
    be.make_add(false)->forward(a, b, sum);
    auto relu = be.make_relu();
    relu->forward(sum, y);
    Tensor dy = activation(be, y.shape(), 73);
    relu->backward(y, dy, dx);
    out[i] = {sum, y, dx};
  }
  compare("add + relu", t, {"sum", "y", "dx"}, out, {"dx"});
}

// A whole model's loss and every parameter's gradient in bf16 against fp32 (the same
// weights and batch), and against the bf16 reference.
BOOST_AUTO_TEST_CASE(whole_model_gradients_in_bf16_are_close_to_fp32) {
  for (const char* name : {"cnn_small", "fibernet"}) {
    Trio t;
    if (!t.ok()) return;
    std::printf("bf16 model %s\n", name);
    const int batch = 6, side = 16, classes = 5;
    std::vector<float> images = random_values(size_t(batch) * side * side, 81);
    std::vector<int32_t> labels;
    for (int i = 0; i < batch; ++i) labels.push_back(i % classes);
    std::vector<std::vector<float>> grads(3);
    double loss[3];
    for (int i = 0; i < 3; ++i) {
      Backend& be = *t.be[i];
      auto model = nn::make_model(name, {1, side, side}, classes, be, 7);
      Tensor x = to_device(be, {batch, 1, side, side}, images);
      model->forward(x, true);
      loss[i] = model->loss(labels.data()).loss;
      model->backward();
      for (auto* p : model->parameters()) {
        std::vector<float> g = to_host(be, p->grad);
        grads[i].insert(grads[i].end(), g.begin(), g.end());
      }
    }
    std::printf("  loss: bf16 %.6f, bf16 reference %.6f, fp32 %.6f\n", loss[0], loss[1], loss[2]);
    BOOST_TEST(std::fabs(loss[0] - loss[2]) <= 1e-2 * std::fabs(loss[2]), name << " loss");
    expect_close(std::string(name) + " gradients vs bf16 ref", grads[0], grads[1],
                 kVsBf16Reference);
    // Against fp32, the direction of the whole gradient: elementwise, ReLU masks flip where
    // bf16 rounding moves a pre-activation across zero, and batch norm over a small batch
    // amplifies the rounding of a few activations (the bf16 reference shows the same
    // differences, so they are bf16's, not this implementation's). Measured here at
    // batch 6: cosine 0.998 (cnn_small), 0.97 (fibernet).
    const double cos = cosine(grads[0], grads[2]);
    std::printf("  %-44s %.4f\n", (std::string(name) + " gradients vs fp32, cosine").c_str(), cos);
    BOOST_TEST(cos >= 0.95, name << ": bf16 and fp32 gradients at cosine " << cos);
  }
}

BOOST_AUTO_TEST_CASE(bf16_on_the_ref_and_cuda_paths_is_refused_or_reference) {
  BOOST_TEST((make_backend("ref", 1, Precision::kBF16)->precision() == Precision::kBF16));
  try {
    parse_precision("fp8");
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == "unknown precision 'fp8': choose fp32, bf16, fp16 or tf32");
  }
}

// fp16 and tf32 are tensor-core precisions: the host backends refuse them by name instead
// of training in fp32 while the deck and the results file say otherwise.
BOOST_AUTO_TEST_CASE(fp16_and_tf32_parse_and_only_cuda_takes_them) {
  BOOST_TEST((parse_precision("fp16") == Precision::kF16));
  BOOST_TEST((parse_precision("tf32") == Precision::kTF32));
  for (const char* text : {"fp32", "bf16", "fp16", "tf32"})
    BOOST_TEST(std::string(precision_name(parse_precision(text))) == text);
  auto refusal = [](const char* backend, Precision precision) {
    try {
      make_backend(backend, 1, precision);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no InputError)");
  };
  BOOST_TEST(refusal("cpu", Precision::kF16) ==
             "train.precision = fp16: the cpu backend runs fp32 or bf16; fp16 runs on "
             "train.backend = cuda");
  BOOST_TEST(refusal("cpu", Precision::kTF32) ==
             "train.precision = tf32: the cpu backend runs fp32 or bf16; tf32 runs on "
             "train.backend = cuda");
  BOOST_TEST(refusal("ref", Precision::kF16) ==
             "train.precision = fp16: the ref backend runs fp32 or bf16; fp16 runs on "
             "train.backend = cuda");
  BOOST_TEST(refusal("ref", Precision::kTF32) ==
             "train.precision = tf32: the ref backend runs fp32 or bf16; tf32 runs on "
             "train.backend = cuda");
}

BOOST_AUTO_TEST_SUITE_END()
