// test_mixed_precision.cpp — the loss read later (every backend), and, where a GPU is, the
// CUDA backend's bf16/fp16/tf32 ops against the fp32 reference, deterministic algorithm
// choice and pinned uploads in flight.
#include <algorithm>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/backend/devices.hpp"

using namespace ringtrain::backend;
using namespace rt_test;
namespace bdata = boost::unit_test::data;

namespace {

std::unique_ptr<Backend> cuda_backend(Precision precision, bool deterministic = false) {
  CudaOptions options;
  options.precision = precision;
  options.deterministic = deterministic;
  return make_cuda_backend(options);
}

// Relative tolerances against fp32 (max |difference| / max |reference|), from each format's
// unit roundoff on inputs of [-1, 1) and sums of at most 144 products accumulated in fp32:
// bf16 (8-bit significand, u = 2^-9) 2e-2, fp16 (11-bit, u = 2^-12) 4e-3, tf32 (11-bit
// inputs, fp32 sums) 4e-3.
double tolerance(Precision precision) {
  return precision == Precision::kBF16 ? 2e-2 : 4e-3;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mixed_precision)

// The host backends' deferred loss is their loss: the same numbers bit for bit and the
// same dlogits, so the trainer reading losses later changes nothing on cpu and ref.
BOOST_DATA_TEST_CASE(host_backends_defer_the_loss_without_changing_it,
                     bdata::make(std::vector<std::string>{"cpu", "ref"}), name) {
  auto be = make_backend(name, 1);
  Tensor logits = random_tensor(*be, {6, 5}, 71, -3, 3);
  const std::vector<int32_t> labels{0, 4, 2, 2, 1, 3};
  Tensor d_now, d_later;
  const LossResult now = be->softmax_cross_entropy(logits, labels.data(), d_now, 0.0f);
  PendingLoss later = be->softmax_cross_entropy_later(logits, labels.data(), d_later, 0.0f);
  const LossResult read = later.get();
  BOOST_TEST(std::memcmp(&read.loss, &now.loss, sizeof(double)) == 0);
  BOOST_TEST(read.correct == now.correct);
  BOOST_TEST(read.count == 6);
  BOOST_TEST(same_bits(to_host(*be, d_later), to_host(*be, d_now)));
  BOOST_TEST(later.get().loss == now.loss);
}

BOOST_AUTO_TEST_CASE(a_pending_loss_is_read_once) {
  int reads = 0;
  PendingLoss pending([&] {
    ++reads;
    return LossResult{1.5, 3, 8};
  });
  BOOST_TEST(reads == 0);
  BOOST_TEST(pending.get().loss == 1.5);
  BOOST_TEST(pending.get().correct == 3);
  BOOST_TEST(reads == 1);
}

// ---- on a GPU ---------------------------------------------------------------------------
// Before this change the CUDA backend refused bf16 (InputError "no bf16 path yet"), had no
// fp16 or tf32 at all, and ran fp32 NCHW with CUDNN_FMA_MATH: each case below failed at
// make_cuda_backend, or at the checks that activations are 16-bit NHWC.

// dbias against the channel sums of the backend's own dy, relative to the sums of |dy|.
// Not against the reference's dbias: the conv feeds a batch norm, whose dx sums to zero over
// each channel, so the reference dbias is rounding noise (~1e-7) and any 16-bit dy gives a
// "relative" error of 1e5 against it (seen on the first H200 run). dy itself is checked
// against the reference as "batch norm dx".
void expect_bias_gradient_sums_dy(const std::string& what, Backend& be, const Tensor& dy,
                                  const Tensor& dbias) {
  const std::vector<float> d = to_host(be, dy), got = to_host(be, dbias);
  const int64_t n = dy.dim(0), c = dy.dim(1), hw = dy.dim(2) * dy.dim(3);
  double worst = 0;
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, magnitude = 0;
    for (int64_t img = 0; img < n; ++img)
      for (int64_t p = 0; p < hw; ++p) {
        const double v = d[size_t((img * c + ch) * hw + p)];
        sum += v, magnitude += std::fabs(v);
      }
    if (magnitude > 0) worst = std::max(worst, std::fabs(got[size_t(ch)] - sum) / magnitude);
  }
  std::printf("  %-44s rel %.3e (to the sums of |dy|)\n", what.c_str(), worst);
  BOOST_TEST(worst <= 1e-5, what << ": relative difference " << worst << " > 1e-05");
}

// bn_relu: the batch norm with its ReLU fused (cuDNN's BN_ACTIVATION kernel where it has one
// for the type, else its batch norm and a separate ReLU: op_choices says which ran).
void check_16_bit_chain(Precision precision, bool bn_relu) {
  auto gpu = cuda_backend(precision);
  auto ref = make_backend("ref", 1);
  const double tol = tolerance(precision);
  std::printf("%s, batch norm%s, tolerance %.0e\n", precision_name(precision),
              bn_relu ? " + ReLU" : "", tol);
  const ConvSpec cs{16, 32, 3, 1, 1, true, true};
  const LinearSpec ls{32 * 9 * 9, 5, true};
  const BatchNormSpec bs{32, 1e-5f, bn_relu};
  Backend* be[2] = {gpu.get(), ref.get()};
  Tensor x[2], w[2], b[2], y[2], n[2], mean[2], var[2], gamma[2], beta[2], fw[2], fb[2], out[2];
  Tensor dout[2], dn[2], dy[2], dx[2], dw[2], db[2], dfw[2], dfb[2], dgamma[2], dbeta[2];
  for (int i = 0; i < 2; ++i) {
    Backend& B = *be[i];
    x[i] = random_tensor(B, {2, 16, 9, 9}, 81);
    w[i] = random_tensor(B, {32, 16, 3, 3}, 82, -0.1f, 0.1f);
    b[i] = random_tensor(B, {32}, 83);
    gamma[i] = random_tensor(B, {32}, 84, 0.5f, 1.5f);
    beta[i] = random_tensor(B, {32}, 85);
    fw[i] = random_tensor(B, {5, 32 * 9 * 9}, 86, -0.02f, 0.02f);
    fb[i] = random_tensor(B, {5}, 87);
    auto conv = B.make_conv(cs);
    auto bn = B.make_batch_norm(bs);
    auto fc = B.make_linear(ls);
    conv->forward(x[i], w[i], &b[i], y[i]);
    bn->forward_training(y[i], gamma[i], beta[i], n[i], mean[i], var[i], nullptr);
    fc->forward(n[i], fw[i], &fb[i], out[i]);
    dout[i] = random_tensor(B, {2, 5}, 88);
    dfw[i] = B.alloc({5, 32 * 9 * 9});
    dfb[i] = B.alloc({5});
    fc->backward_weights(n[i], dout[i], dfw[i], &dfb[i]);
    fc->backward_data(dout[i], fw[i], dn[i]);
    dgamma[i] = B.alloc({32});
    dbeta[i] = B.alloc({32});
    bn->backward(y[i], dn[i], gamma[i], mean[i], var[i], dy[i], dgamma[i], dbeta[i], nullptr);
    dw[i] = B.alloc({32, 16, 3, 3});
    db[i] = B.alloc({32});
    conv->backward_weights(x[i], dy[i], dw[i], &db[i]);
    conv->backward_data(dy[i], w[i], dx[i]);
  }
  // Activations really are 16-bit NHWC; what the optimizer sees is fp32.
  BOOST_TEST((y[0].dtype() == (precision == Precision::kBF16 ? DType::kBF16 : DType::kF16)));
  BOOST_TEST(!y[0].is_plain());
  BOOST_TEST((dw[0].dtype() == DType::kF32 && dw[0].is_plain()));
  BOOST_TEST((mean[0].dtype() == DType::kF32));
  expect_close("conv+relu y", *gpu, y[0], *ref, y[1], tol);
  expect_close("batch norm y", *gpu, n[0], *ref, n[1], tol);
  expect_close("batch mean", *gpu, mean[0], *ref, mean[1], tol);
  expect_close("linear y", *gpu, out[0], *ref, out[1], tol);
  expect_close("linear dw", *gpu, dfw[0], *ref, dfw[1], tol);
  expect_close("linear dbias", *gpu, dfb[0], *ref, dfb[1], tol);
  expect_close("batch norm dx", *gpu, dy[0], *ref, dy[1], 2 * tol);
  expect_close("batch norm dgamma", *gpu, dgamma[0], *ref, dgamma[1], 2 * tol);
  expect_close("conv dw", *gpu, dw[0], *ref, dw[1], 2 * tol);
  expect_bias_gradient_sums_dy("conv dbias", *gpu, dy[0], db[0]);
  expect_close("conv dx", *gpu, dx[0], *ref, dx[1], 2 * tol);
  if (!bn_relu) return;
  // The ReLU really cut: a fused kernel that skipped it would pass on all-positive outputs.
  const std::vector<float> relu_out = to_host(*ref, n[1]);
  const size_t zeros = size_t(std::count(relu_out.begin(), relu_out.end(), 0.0f));
  std::printf("  ReLU zeroes %zu of %zu outputs; %s\n", zeros, relu_out.size(),
              gpu->op_choices().c_str());
  BOOST_TEST(zeros > relu_out.size() / 5);
  BOOST_TEST(zeros < relu_out.size() * 4 / 5);
  BOOST_TEST(gpu->op_choices().find("batch norm + ReLU: fused ") == 0, gpu->op_choices());
}

BOOST_AUTO_TEST_CASE(conv_linear_and_batch_norm_in_16_bit_match_fp32,
                     *boost::unit_test::precondition(GpuPresent())) {
  for (bool bn_relu : {false, true}) {
    check_16_bit_chain(Precision::kBF16, bn_relu);
    check_16_bit_chain(Precision::kF16, bn_relu);
  }
}

// The 16-bit conv bias gradient over many rows (N*H*W = 65536, C = 40: a partial column
// tile; and 969 rows: a partial chunk), exact: every dy is a multiple of 1/8 in [-8, 8], held
// exactly by bf16 and fp16, and every partial sum is a multiple of 1/8 below 2^21, held
// exactly by fp32, so dbias must equal the host's double sums bit for bit whatever the
// summation order. A row, lane, chunk or column dropped or counted twice changes a sum by a
// multiple of 1/8. The one-thread-per-column kernel before was correct too (only slow): this
// case guards the two-pass reduction that replaced it; it did not fail before.
void check_exact_conv_bias_gradient(Precision precision, const Shape& x_shape, int channels) {
  auto gpu = cuda_backend(precision);
  const ConvSpec cs{int(x_shape[1]), channels, 3, 1, 1, true, false};
  auto conv = gpu->make_conv(cs);
  Tensor x = random_tensor(*gpu, x_shape, 91),
         w = random_tensor(*gpu, {channels, cs.in_channels, 3, 3}, 92);
  Tensor b = random_tensor(*gpu, {channels}, 93), y;
  conv->forward(x, w, &b, y);
  const int64_t n = x_shape[0], hw = x_shape[2] * x_shape[3];
  std::vector<float> dy_host(size_t(n * channels * hw));
  std::vector<double> expected(size_t(channels), 0.0);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t i = (img * channels + c) * hw + p;
        const float v = float((i * 7919 + c * 31) % 129 - 64) / 8.0f;  // position-dependent
        dy_host[size_t(i)] = v;
        expected[size_t(c)] += v;
      }
  Tensor dy = to_device(*gpu, y.shape(), dy_host);
  Tensor dw = gpu->alloc(w.shape()), db = gpu->alloc({channels});
  conv->backward_weights(x, dy, dw, &db);
  const std::vector<float> got = to_host(*gpu, db);
  size_t wrong = 0;
  for (int c = 0; c < channels; ++c) wrong += double(got[size_t(c)]) != expected[size_t(c)];
  BOOST_TEST(wrong == 0u, precision_name(precision)
                              << " x " << shape_str(x_shape) << ": " << wrong
                              << " channels differ, e.g. " << got[0] << " vs " << expected[0]);
}

BOOST_AUTO_TEST_CASE(conv_bias_gradient_in_16_bit_is_exact_over_many_rows,
                     *boost::unit_test::precondition(GpuPresent())) {
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    check_exact_conv_bias_gradient(precision, {64, 4, 32, 32}, 40);
    check_exact_conv_bias_gradient(precision, {3, 4, 17, 19}, 40);
  }
}

BOOST_AUTO_TEST_CASE(tf32_conv_and_linear_within_tolerance,
                     *boost::unit_test::precondition(GpuPresent())) {
  auto gpu = cuda_backend(Precision::kTF32);
  auto ref = make_backend("ref", 1);
  BOOST_TEST((gpu->precision() == Precision::kTF32));
  Backend* be[2] = {gpu.get(), ref.get()};
  Tensor x[2], w[2], y[2], fw[2], out[2], dout[2], dy[2], dfw[2];
  for (int i = 0; i < 2; ++i) {
    x[i] = random_tensor(*be[i], {2, 16, 8, 8}, 91);
    w[i] = random_tensor(*be[i], {32, 16, 3, 3}, 92, -0.1f, 0.1f);
    fw[i] = random_tensor(*be[i], {5, 32 * 64}, 93, -0.02f, 0.02f);
    auto conv = be[i]->make_conv({16, 32, 3, 1, 1, false, false});
    auto fc = be[i]->make_linear({32 * 64, 5, false});
    conv->forward(x[i], w[i], nullptr, y[i]);
    fc->forward(y[i], fw[i], nullptr, out[i]);
    dout[i] = random_tensor(*be[i], {2, 5}, 94);
    dfw[i] = be[i]->alloc({5, 32 * 64});
    fc->backward_weights(y[i], dout[i], dfw[i], nullptr);
    fc->backward_data(dout[i], fw[i], dy[i]);
  }
  BOOST_TEST((y[0].dtype() == DType::kF32 && !y[0].is_plain()));  // tf32: fp32, channels last
  const double tol = tolerance(Precision::kTF32);
  expect_close("tf32 conv y", *gpu, y[0], *ref, y[1], tol);
  expect_close("tf32 linear y", *gpu, out[0], *ref, out[1], tol);
  expect_close("tf32 linear dw", *gpu, dfw[0], *ref, dfw[1], tol);
  expect_close("tf32 linear dx", *gpu, dy[0], *ref, dy[1], tol);
}

// With train.deterministic the algorithms cudnnFind measured are filtered to deterministic
// ones (choose_algorithm, tested on fake lists in cuda_backend/), so fresh ops on a shape
// whose fastest backward-filter algorithms use atomics give the same bits every time. Before:
// heuristics took a non-deterministic algorithm silently when no deterministic one fitted,
// and the key did not exist.
BOOST_AUTO_TEST_CASE(deterministic_find_repeats_bitwise,
                     *boost::unit_test::precondition(GpuPresent())) {
  auto gpu = cuda_backend(Precision::kF32, true);
  Tensor x = random_tensor(*gpu, {32, 64, 16, 16}, 101);
  Tensor w = random_tensor(*gpu, {64, 64, 3, 3}, 102, -0.1f, 0.1f);
  Tensor dy = random_tensor(*gpu, {32, 64, 16, 16}, 103);
  std::vector<float> first_dw, first_dx;
  for (int run = 0; run < 3; ++run) {
    auto conv = gpu->make_conv({64, 64, 3, 1, 1, false, false});
    Tensor y, dx, dw = gpu->alloc({64, 64, 3, 3});
    conv->forward(x, w, nullptr, y);
    conv->backward_weights(x, dy, dw, nullptr);
    conv->backward_data(dy, w, dx);
    if (run == 0) {
      first_dw = to_host(*gpu, dw);
      first_dx = to_host(*gpu, dx);
      continue;
    }
    BOOST_TEST(same_bits(to_host(*gpu, dw), first_dw), "dw differs in run " << run);
    BOOST_TEST(same_bits(to_host(*gpu, dx), first_dx), "dx differs in run " << run);
  }
}

// Uploads return once the values are in pinned staging: four in a row (two staging buffers,
// so the third waits for the first's transfer) from one host buffer overwritten after each,
// without a synchronisation between them, each land whole in their tensor. A staging buffer
// refilled while its transfer was in flight would show another upload's values.
BOOST_AUTO_TEST_CASE(uploads_in_flight_land_whole, *boost::unit_test::precondition(GpuPresent())) {
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    auto gpu = cuda_backend(precision);
    const Shape shape{64, 3, 64, 64};
    std::vector<float> host;
    std::vector<std::vector<float>> sent;
    Tensor t[4];
    for (int i = 0; i < 4; ++i) {
      host = random_values(size_t(shape_numel(shape)), 111 + uint64_t(i));
      sent.push_back(host);
      t[i] = gpu->alloc(shape);
      gpu->upload(host.data(), t[i]);
      std::fill(host.begin(), host.end(), -7.0f);  // the caller reuses its memory at once
    }
    for (int i = 0; i < 4; ++i) BOOST_TEST(same_bits(to_host(*gpu, t[i]), sent[size_t(i)]));
  }
}

// The CUDA loss read later: the same numbers as the loss read now, close to the reference,
// also when a later batch's loss was queued before the first was read.
BOOST_AUTO_TEST_CASE(cuda_loss_read_later, *boost::unit_test::precondition(GpuPresent())) {
  auto gpu = cuda_backend(Precision::kF32);
  auto ref = make_backend("ref", 1);
  std::vector<int32_t> labels{0, 4, 2, 2, 1, 3, 4};
  Tensor logits = random_tensor(*gpu, {7, 5}, 121, -3, 3);
  Tensor ref_logits = random_tensor(*ref, {7, 5}, 121, -3, 3);
  Tensor d1, d2, dref;
  PendingLoss first = gpu->softmax_cross_entropy_later(logits, labels.data(), d1, 0.0f);
  labels.assign(7, 1);  // the labels may change once the call returned
  PendingLoss second = gpu->softmax_cross_entropy_later(logits, labels.data(), d2, 0.0f);
  const LossResult want_first = ref->softmax_cross_entropy(
      ref_logits, std::vector<int32_t>{0, 4, 2, 2, 1, 3, 4}.data(), dref, 0.0f);
  const LossResult want_second = ref->softmax_cross_entropy(ref_logits, labels.data(), dref, 0.0f);
  const LossResult got_second = second.get();
  const LossResult got_first = first.get();
  BOOST_TEST(got_first.loss == want_first.loss, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(got_first.correct == want_first.correct);
  BOOST_TEST(got_second.loss == want_second.loss, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(got_second.count == 7);
}

BOOST_AUTO_TEST_SUITE_END()
