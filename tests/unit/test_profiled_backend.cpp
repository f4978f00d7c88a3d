// test_profiled_backend.cpp — the per-op profile: every op of a training step booked under its
// kind, the products' FLOPs the model's own count, and the numbers the same as unprofiled; the
// memory each op takes booked under its kind, and the split of the peak.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>

#include "nn_test_util.hpp"
#include "ringtrain/backend/profiled_backend.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"

using namespace ringtrain;
using namespace rt_test;
using backend::OpKind;

namespace {

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> weights;
};

// One SGD step of cnn_small on a fixed batch of 6 images 1x12x12.
StepResult one_step(backend::Backend& be, nn::Model** model_out = nullptr) {
  static std::unique_ptr<nn::Model> keep;
  keep = nn::make_model("cnn_small", {1, 12, 12}, 4, be, 5);
  nn::Model& model = *keep;
  nn::Optimizer sgd(model.parameters(), {0.9, false, 5e-4, false}, be);
  const std::vector<float> pixels = random_values(6 * 12 * 12, 31, -1, 1);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 0, 1};
  backend::Tensor x = be.alloc({6, 1, 12, 12});
  be.upload(pixels.data(), x);
  model.forward(x, true);
  StepResult r;
  r.loss = model.loss(labels.data()).loss;
  model.backward();
  sgd.step(0.05);
  for (const nn::Parameter* p : model.parameters()) r.weights.push_back(to_host(be, p->value));
  if (model_out) *model_out = &model;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profiled_backend)

// cnn_small: conv1 (no input gradient) -> pool -> relu -> conv2 -> pool -> relu -> fc1 -> relu
// -> fc2; 8 parameters. Before: no profile existed (issue 36's first item).
BOOST_AUTO_TEST_CASE(a_training_step_is_booked_by_kind_and_unchanged) {
  auto plain = backend::make_backend("ref", 1);
  const StepResult want = one_step(*plain);

  auto profile = std::make_shared<backend::OpProfile>();
  auto profiled = backend::make_profiled_backend(backend::make_backend("ref", 1), profile);
  BOOST_TEST(profiled->name() == "ref");
  profile->clear();
  nn::Model* model = nullptr;
  const StepResult got = one_step(*profiled, &model);

  BOOST_TEST(std::memcmp(&got.loss, &want.loss, sizeof(double)) == 0);
  BOOST_REQUIRE(got.weights.size() == want.weights.size());
  for (size_t i = 0; i < got.weights.size(); ++i)
    BOOST_TEST(same_bits(got.weights[i], want.weights[i]), "parameter " << i);

  auto calls = [&](OpKind k) { return profile->calls[size_t(k)]; };
  BOOST_TEST(calls(OpKind::kConvForward) == 2);
  BOOST_TEST(calls(OpKind::kConvBackwardData) == 1);  // conv1's input needs no gradient
  BOOST_TEST(calls(OpKind::kConvBackwardWeights) == 2);
  BOOST_TEST(calls(OpKind::kMatmulForward) == 2);
  BOOST_TEST(calls(OpKind::kMatmulBackwardData) == 2);
  BOOST_TEST(calls(OpKind::kMatmulBackwardWeights) == 2);
  // Each pool runs with its ReLU as one op (MaxPoolReLU), booked as a pool; fc1's ReLU alone.
  BOOST_TEST(calls(OpKind::kPool) == 4);
  BOOST_TEST(calls(OpKind::kRelu) == 2);
  BOOST_TEST(calls(OpKind::kLoss) == 1);
  BOOST_TEST(calls(OpKind::kOptimizer) == 1);  // the 8 tensors in one sgd_update_many
  BOOST_TEST(calls(OpKind::kBatchNormForward) == 0);
  BOOST_TEST(calls(OpKind::kAdd) == 0);

  // The products' FLOPs against the model's own count, from the layers' formulas: forward
  // is forward_flops_per_image x 6; conv2's backward-data and both backward-weights repeat
  // their forward's work.
  auto flops = [&](OpKind k) { return profile->flops[size_t(k)]; };
  const double forward = flops(OpKind::kConvForward) + flops(OpKind::kMatmulForward);
  BOOST_TEST(forward == 6 * model->forward_flops_per_image(), boost::test_tools::tolerance(1e-12));
  const double conv1 = 2.0 * 6 * 32 * 12 * 12 * 1 * 9, conv2 = 2.0 * 6 * 64 * 6 * 6 * 32 * 9;
  BOOST_TEST(flops(OpKind::kConvForward) == conv1 + conv2);
  BOOST_TEST(flops(OpKind::kConvBackwardData) == conv2);
  BOOST_TEST(flops(OpKind::kConvBackwardWeights) == conv1 + conv2);
  BOOST_TEST(flops(OpKind::kMatmulBackwardWeights) == flops(OpKind::kMatmulForward));

  double booked = 0;
  for (int k = 0; k < backend::kOpKinds; ++k) {
    BOOST_TEST(profile->seconds[size_t(k)] >= 0.0);
    booked += profile->seconds[size_t(k)];
  }
  BOOST_TEST(profile->total_seconds() == booked);
  BOOST_TEST(profile->seconds[size_t(OpKind::kConvForward)] > 0.0);
  BOOST_TEST(std::string(backend::op_kind_key(OpKind::kConvBackwardWeights)) == "conv_bwd_weights");
}

// On cpu the reorders inside the ops (into and out of oneDNN's blocked layouts) are booked
// apart, all of them and once: the step's reorder calls are every one the backend ran, and the
// kinds together take no more than the step's wall time.
BOOST_AUTO_TEST_CASE(reorders_inside_ops_are_booked_apart) {
  auto profile = std::make_shared<backend::OpProfile>();
  auto profiled = backend::make_profiled_backend(backend::make_backend("cpu", 1), profile);
  const auto start = std::chrono::steady_clock::now();
  one_step(*profiled);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const backend::ReorderTime ran = profiled->reorder_time();
  std::printf("cpu step: %lld reorders, %.3f ms of %.3f ms booked\n",
              static_cast<long long>(ran.calls), 1e3 * ran.seconds, 1e3 * profile->total_seconds());
  BOOST_TEST(ran.calls > 0);  // cnn_small's weights go into oneDNN's blocked layouts
  BOOST_TEST(profile->calls[size_t(OpKind::kReorder)] == ran.calls);
  BOOST_TEST(profile->seconds[size_t(OpKind::kReorder)] == ran.seconds,
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(profile->total_seconds() <= wall);
  BOOST_TEST(std::string(backend::op_kind_key(OpKind::kReorder)) == "reorder");

  auto ref_profile = std::make_shared<backend::OpProfile>();
  auto ref = backend::make_profiled_backend(backend::make_backend("ref", 1), ref_profile);
  one_step(*ref);
  BOOST_TEST(ref_profile->calls[size_t(OpKind::kReorder)] == 0);
}

// rt-bench-compute --memory-map: the profiled backend books what each op takes under its kind,
// with a profile or without one (null: nothing timed). Host tensors of the whole process make
// the ledger, so the test reads what these calls added: ref's convolution forward takes its
// output alone, the loss its logits' gradient; the tensors made outside the ops stay
// outside_ops.
BOOST_AUTO_TEST_CASE(memory_is_booked_under_the_kind_of_op_that_took_it) {
  for (const bool timed : {false, true}) {
    BOOST_TEST_CONTEXT("profile " << timed) {
      auto profile = timed ? std::make_shared<backend::OpProfile>() : nullptr;
      auto be = backend::make_profiled_backend(backend::make_backend("ref", 1), profile);
      backend::ConvSpec spec;
      spec.in_channels = 2, spec.out_channels = 5, spec.kernel = 3, spec.padding = 1;
      auto conv = be->make_conv(spec);
      backend::Tensor x = be->alloc({3, 2, 7, 7}), w = be->alloc({5, 2, 3, 3}), b = be->alloc({5});
      be->fill(x, 0.5f), be->fill(w, 0.25f), be->fill(b, 0.0f);
      be->reset_memory_peak();
      const backend::MemoryUse before = be->memory_use();
      BOOST_TEST(before.at_peak.total_bytes() == before.peak);
      backend::Tensor y, dlogits;
      conv->forward(x, w, &b, y);
      backend::Tensor logits = be->alloc({3, 4});
      be->fill(logits, 1.0f);
      const int32_t labels[] = {0, 1, 3};
      be->softmax_cross_entropy(logits, labels, dlogits, 0.0f);
      const backend::MemoryUse after = be->memory_use();
      auto added = [&](int tag) {
        return after.at_peak.bytes[size_t(tag)] - before.at_peak.bytes[size_t(tag)];
      };
      BOOST_TEST(added(int(OpKind::kConvForward)) == 2944u);  // 2,940 bytes in 64-byte blocks
      BOOST_TEST(added(int(OpKind::kLoss)) == 64u);
      BOOST_TEST(added(backend::kOutsideOpsTag) == 64u);  // the logits
      BOOST_TEST(after.at_peak.total_bytes() == after.peak);
      BOOST_TEST(after.peak - before.peak == 2944u + 64 + 64);
      if (timed) BOOST_TEST(profile->calls[size_t(OpKind::kConvForward)] == 1);
    }
  }
  BOOST_TEST(std::string(backend::memory_tag_key(backend::kWorkspaceTag)) == "workspace");
  BOOST_TEST(std::string(backend::memory_tag_key(backend::kOutsideOpsTag)) == "outside_ops");
  BOOST_TEST(std::string(backend::memory_tag_key(int(OpKind::kLoss))) == "loss");
}

// The split kept is that of the first moment the total reached its peak: given back or taken
// after, below or at the same peak, it stays; reset_peak starts it from what is in use.
BOOST_AUTO_TEST_CASE(the_ledger_keeps_the_split_of_the_peak) {
  backend::MemoryLedger ledger;
  const int conv = int(OpKind::kConvForward), norm = int(OpKind::kBatchNormForward);
  ledger.take(backend::kOutsideOpsTag, 100);
  ledger.take(conv, 50);
  ledger.give(conv, 50);
  ledger.take(norm, 50);  // the same total as the peak: the conv's split stays
  BOOST_TEST(ledger.peak() == 150u);
  BOOST_TEST(ledger.at_peak().bytes[size_t(conv)] == 50u);
  BOOST_TEST(ledger.at_peak().bytes[size_t(norm)] == 0u);
  BOOST_TEST(ledger.now().bytes[size_t(norm)] == 50u);
  ledger.take(norm, 1);
  BOOST_TEST(ledger.at_peak().bytes[size_t(norm)] == 51u);
  BOOST_TEST(ledger.at_peak().blocks[size_t(norm)] == 2u);
  BOOST_TEST(ledger.at_peak().bytes[size_t(conv)] == 0u);
  ledger.give(norm, 51);
  ledger.reset_peak();
  BOOST_TEST(ledger.peak() == 100u);
  BOOST_TEST(ledger.at_peak().total_bytes() == 100u);
  BOOST_TEST(ledger.in_use() == 100u);
  {
    const backend::MemoryTagScope outer(conv);
    {
      const backend::MemoryTagScope inner(backend::kWorkspaceTag);
      BOOST_TEST(backend::current_memory_tag() == backend::kWorkspaceTag);
    }
    BOOST_TEST(backend::current_memory_tag() == conv);
  }
  BOOST_TEST(backend::current_memory_tag() == backend::kOutsideOpsTag);
}

BOOST_AUTO_TEST_SUITE_END()
