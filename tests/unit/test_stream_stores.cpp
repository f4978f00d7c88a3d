// test_stream_stores.cpp — outputs of 4 MiB and more that the cpu backend's own loops write past
// the caches (non-temporal stores, lane_pack.hpp): batch norm forward and backward, with and
// without its ReLU and residual, a stem's fused batch norm + ReLU + max pool backward, and the
// ReLU backward of a sum give the same bits as with RINGTRAIN_STREAM_STORES=off, at either pack
// width and thread count, in blocked and plain layouts (a length no pack divides); the passes
// are counted as streamed only when on; any other value of the switch is refused by name.
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../src/backend/cpu/lane_pack.hpp"  // streamed_outputs
#include "nn_test_util.hpp"
#include "norm_outputs.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;
using ringtrain::backend::cpu::streamed_outputs;

namespace {

// 16 x 64 x 32 x 32 fp32: 4 MiB, the smallest output that streams.
const Shape kStreamed{16, 64, 32, 32};

// RINGTRAIN_STREAM_STORES (and RINGTRAIN_CPU_PACK_LANES where given: 8, the bundle's width;
// unset, the widest this build takes) for a scope.
struct Setting {
  Setting(const char* stream, const char* lanes) {
    setenv("RINGTRAIN_STREAM_STORES", stream, 1);
    if (lanes) setenv("RINGTRAIN_CPU_PACK_LANES", lanes, 1);
  }
  ~Setting() {
    unsetenv("RINGTRAIN_STREAM_STORES");
    unsetenv("RINGTRAIN_CPU_PACK_LANES");
  }
};

// A batch norm's training forward (with its ReLU, or plus a residual and ReLU in the fused pass)
// and backward, gamma, beta, r and dy seeded.
NormOutputs norm_step(Backend& be, const Tensor& x, bool relu, bool residual) {
  const int c = int(x.dim(1));
  Tensor gamma = random_tensor(be, {c}, 401, 0.5f, 1.5f), beta = random_tensor(be, {c}, 402);
  auto bn = be.make_batch_norm({c, 1e-5f, relu && !residual});
  Tensor y, mean, var, masked, dx, dgamma = be.alloc({c}), dbeta = be.alloc({c});
  double count = 0;
  if (residual) {
    const Tensor r = random_tensor(be, x.shape(), 403);
    count = bn->forward_training_add_relu(x, gamma, beta, r, y, mean, var, nullptr);
    BOOST_REQUIRE(count > 0);  // the fused pass ran
  } else {
    count = bn->forward_training(x, gamma, beta, y, mean, var, nullptr);
  }
  const Tensor dy = random_tensor(be, y.shape(), 404);
  const Tensor* g = &dy;
  if (residual) {
    be.make_relu()->backward(y, dy, masked);
    g = &masked;
  }
  bn->backward(x, *g, gamma, mean, var, dx, dgamma, dbeta, nullptr);
  return download_norm_outputs(be, count, y, mean, var, dx, dgamma, dbeta);
}

// A stem's batch norm + ReLU + 2x2 max pool (fused), forward and backward; x 16 x 16 x 64 x 65
// (4.3 MB: the input gradient streams, its last column past the last whole tile).
NormOutputs stem_step(Backend& be, const std::vector<float>& xv) {
  const Shape shape{16, 16, 64, 65};
  const Tensor x = as_conv_output(be, shape, xv);
  auto op = be.make_norm_relu_max_pool({16, 1e-5f, 2});
  Tensor gamma = random_tensor(be, {16}, 405, 0.5f, 1.5f), beta = random_tensor(be, {16}, 406);
  Tensor y, mean, var, dx, dgamma = be.alloc({16}), dbeta = be.alloc({16});
  const double count = op->forward_training(x, gamma, beta, y, mean, var, nullptr);
  const Tensor dy = random_tensor(be, y.shape(), 407);
  op->backward(x, dy, gamma, mean, var, dx, dgamma, dbeta, nullptr);
  return download_norm_outputs(be, count, y, mean, var, dx, dgamma, dbeta);
}

// The ReLU backward of a + b at y = relu(z), z and a in x's layout (as_conv_output: blocked) or
// plain, b plain.
std::vector<float> relu_of_sum(Backend& be, const Shape& shape, bool blocked) {
  const std::vector<float> zv = random_values(size_t(shape_numel(shape)), 411, -1, 1);
  const std::vector<float> av = random_values(size_t(shape_numel(shape)), 412, -1, 1);
  const Tensor z = blocked ? as_conv_output(be, shape, zv) : to_device(be, shape, zv);
  const Tensor a = blocked ? as_conv_output(be, shape, av) : to_device(be, shape, av);
  const Tensor b = random_tensor(be, shape, 413);
  auto relu = be.make_relu();
  Tensor y, dx;
  relu->forward(z, y);
  relu->backward_of_sum(y, a, b, dx);
  return to_host(be, dx);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stream_stores)

BOOST_AUTO_TEST_CASE(batch_norm_passes_stream_the_same_bits) {
  const std::vector<float> xv = random_values(size_t(shape_numel(kStreamed)), 421, -1, 3);
  for (const char* lanes : {static_cast<const char*>(nullptr), "8"})
    for (int threads : {1, 2})
      for (int kind = 0; kind < 3; ++kind) {  // plain, with ReLU, with residual and ReLU
        const bool relu = kind > 0, residual = kind == 2;
        NormOutputs out[2];
        uint64_t streamed[2];
        for (int on = 0; on < 2; ++on) {
          const Setting setting(on ? "on" : "off", lanes);
          auto be = make_backend("cpu", threads);
          const uint64_t before = streamed_outputs();
          out[on] = norm_step(*be, as_conv_output(*be, kStreamed, xv), relu, residual);
          streamed[on] = streamed_outputs() - before;
        }
        std::printf(
            "batch norm, %s lanes, %d threads, relu %d, residual %d: %llu passes streamed\n",
            lanes ? lanes : "widest", threads, relu, residual, (unsigned long long)streamed[1]);
        BOOST_TEST(streamed[0] == 0u);
        BOOST_TEST(streamed[1] == 2u);  // normalise and the input gradient
        expect_same_bits(out[1], out[0]);
      }
}

BOOST_AUTO_TEST_CASE(stem_input_gradient_streams_the_same_bits) {
  const std::vector<float> xv = random_values(size_t(16 * 16 * 64 * 65), 441, -1, 3);
  for (const char* lanes : {static_cast<const char*>(nullptr), "8"}) {
    NormOutputs out[2];
    uint64_t streamed[2];
    for (int on = 0; on < 2; ++on) {
      const Setting setting(on ? "on" : "off", lanes);
      auto be = make_backend("cpu", 2);
      const uint64_t before = streamed_outputs();
      out[on] = stem_step(*be, xv);
      streamed[on] = streamed_outputs() - before;
      BOOST_TEST(be->op_choices().find("batch norm + ReLU + max pool: fused 1") !=
                 std::string::npos);
    }
    BOOST_TEST(streamed[0] == 0u);
    BOOST_TEST(streamed[1] == 1u);
    expect_same_bits(out[1], out[0]);
  }
}

// Against the reference as well: streamed stores hold the reference's numbers.
BOOST_AUTO_TEST_CASE(streamed_batch_norm_matches_the_reference) {
  const std::vector<float> xv = random_values(size_t(shape_numel(kStreamed)), 431, -1, 3);
  auto cpu = make_backend("cpu", 2);
  auto ref = make_backend("ref", 2);
  const uint64_t before = streamed_outputs();
  const NormOutputs got = norm_step(*cpu, as_conv_output(*cpu, kStreamed, xv), true, false);
  BOOST_TEST(streamed_outputs() - before == 2u);
  expect_all_close(got, norm_step(*ref, to_device(*ref, kStreamed, xv), true, false));
}

// Blocked, and plain with 1025 x 1025 values (4.2 MB): a tail that no pack of 16 or 8 divides.
BOOST_AUTO_TEST_CASE(relu_backward_of_a_sum_streams_the_same_bits) {
  for (const auto& [shape, blocked] :
       {std::pair{kStreamed, true}, {Shape{1, 1, 1025, 1025}, false}})
    for (const char* lanes : {static_cast<const char*>(nullptr), "8"}) {
      std::vector<float> out[2];
      uint64_t streamed[2];
      for (int on = 0; on < 2; ++on) {
        const Setting setting(on ? "on" : "off", lanes);
        auto be = make_backend("cpu", 2);
        const uint64_t before = streamed_outputs();
        out[on] = relu_of_sum(*be, shape, blocked);
        streamed[on] = streamed_outputs() - before;
      }
      BOOST_TEST(streamed[0] == 0u);
      BOOST_TEST(streamed[1] == 1u);
      BOOST_TEST(same_bits(out[1], out[0]), shape_str(shape)
                                                << ", " << (lanes ? lanes : "widest") << " lanes");
    }
}

BOOST_AUTO_TEST_CASE(other_values_of_the_switch_are_refused) {
  const Setting setting("yes", nullptr);
  auto be = make_backend("cpu", 1);
  BOOST_TEST(error_of([&] { relu_of_sum(*be, kStreamed, true); }) ==
             "RINGTRAIN_STREAM_STORES=yes: use on (the default) or off");
  BOOST_TEST(error_of([&] {
               relu_of_sum(*be, {2, 16, 8, 8}, true);
             }) == "(no error)");  // an output under 4 MiB does not read it
}

BOOST_AUTO_TEST_SUITE_END()
