// test_inference_plan.cpp — InferencePlan against Model::forward(x, false): every zoo model and
// the inspection heads on each backend, what it folds and fuses, repeated and resized batches.
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <string>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/inference_plan.hpp"
#include "ringtrain/nn/model.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using namespace rt_test;
using backend::Precision;

namespace {

// Folding rounds each weight once more in fp32 and sums in another order: a few ulps of the
// largest logit.
constexpr double kFp32 = 2e-5;
// bf16 activations both ways, but the folded path rounds fewer intermediate tensors (no BN
// output, no sum before the ReLU): measured 3.5e-3 to 5.3e-3 of the largest logit.
constexpr double kBf16 = 1.6e-2;

// Batch norms that do something: random running statistics, scales and shifts (a fresh model
// has mean 0, var 1, gamma 1, beta 0, which would hide a wrong fold).
void randomise_batch_norms(Model& model, uint64_t seed) {
  Backend& be = model.backend();
  for (Parameter* p : model.parameters()) {
    if (p->role == ParamRole::kNormScale)
      be.upload(random_values(size_t(p->value.numel()), seed++, 0.5f, 1.5f).data(), p->value);
    if (p->role == ParamRole::kNormShift)
      be.upload(random_values(size_t(p->value.numel()), seed++, -0.5f, 0.5f).data(), p->value);
  }
  for (const NamedBuffer& b : model.buffers()) {
    const bool is_var = b.name.find("running_var") != std::string::npos;
    const bool is_mean = b.name.find("running_mean") != std::string::npos;
    if (!is_var && !is_mean) continue;
    be.upload(random_values(size_t(b.tensor->numel()), seed++, is_var ? 0.5f : -0.5f,
                            is_var ? 2.0f : 0.5f)
                  .data(),
              *b.tensor);
  }
}

struct Case {
  std::string model;
  ModelInput in;
  Heads heads;
  int batch_norms, residuals;  // in the model: what the plan must fold and (cpu) fuse
  int relus;                   // ReLUs after a batch norm, an addition or a max pool: fused
};

const Case kCases[] = {
    {"cnn_small", {1, 28, 28}, Heads::kClass, 0, 0, 2},
    {"resnet18_cifar", {3, 16, 16}, Heads::kClass, 20, 8, 17},
    {"fibernet", {1, 32, 32}, Heads::kInspect, 12, 4, 9},
};

std::unique_ptr<Model> model_for(const Case& c, Backend& be) {
  HeadsSpec heads{c.heads, c.heads == Heads::kInspect ? 5 : 0};
  auto model = make_model(c.model, c.in, 5, be, 17, heads);
  randomise_batch_norms(*model, 99);
  return model;
}

Tensor input_for(Backend& be, const Case& c, int batch, uint64_t seed) {
  return random_tensor(be, {batch, c.in.channels, c.in.height, c.in.width}, seed);
}

// The plan's outputs against the model's own inference forward, on batch sizes 4, 3 and 4 again.
void check_against_forward(Backend& be, const Case& c, double tol) {
  auto model = model_for(c, be);
  InferencePlan plan(*model);
  std::printf(
      "inference plan %s on %s %s: %d steps, %d batch norms folded, %d ReLUs fused, %d "
      "residuals fused\n",
      c.model.c_str(), be.name().c_str(), backend::precision_name(be.precision()),
      plan.stats().steps, plan.stats().folded_batch_norms, plan.stats().fused_relus,
      plan.stats().fused_residuals);
  BOOST_TEST(plan.stats().folded_batch_norms == c.batch_norms);
  BOOST_TEST(plan.stats().fused_relus == c.relus);
  BOOST_TEST(plan.stats().fused_residuals == (be.fuses_conv_residual() ? c.residuals : 0));
  for (int batch : {4, 3, 4}) {
    Tensor x = input_for(be, c, batch, 1000 + uint64_t(batch));
    const std::vector<float> want = to_host(be, model->forward(x, false));
    std::vector<std::vector<float>> want_heads;
    if (model->inspect())
      for (Head h : {Head::kDefects, Head::kPass, Head::kZones})
        want_heads.push_back(to_host(be, model->inspect()->output(h)));
    plan.run(x);
    expect_close("logits, batch " + std::to_string(batch), to_host(be, plan.logits()), want, tol);
    for (size_t h = 0; h < want_heads.size(); ++h)
      expect_close("head " + std::to_string(h), to_host(be, plan.head(Head(h))), want_heads[h],
                   tol);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(inference_plan)

BOOST_AUTO_TEST_CASE(every_model_matches_its_inference_forward_on_each_backend) {
  std::vector<std::string> backends = testable_backends();
  backends.push_back("ref");
  for (const std::string& name : backends) {
    auto be = backend::make_backend(name, 2);
    for (const Case& c : kCases) check_against_forward(*be, c, kFp32);
  }
}

BOOST_AUTO_TEST_CASE(bf16_matches_the_bf16_inference_forward) {
  std::unique_ptr<Backend> be;
  try {
    be = backend::make_backend("cpu", 2, Precision::kBF16);
  } catch (const InputError& e) {
    std::printf("inference plan bf16: skipped: %s\n", e.what());
    return;
  }
  for (const Case& c : kCases) check_against_forward(*be, c, kBf16);
}

// A residual accumulated in place must not leak into the next pass: the same input gives the
// same logits bit for bit, before and after another input ran.
BOOST_AUTO_TEST_CASE(a_pass_leaves_nothing_behind_for_the_next) {
  auto be = backend::make_backend("cpu", 2);
  const Case& c = kCases[1];
  auto model = model_for(c, *be);
  InferencePlan plan(*model);
  Tensor a = input_for(*be, c, 4, 5), b = input_for(*be, c, 4, 6);
  plan.run(a);
  const std::vector<float> first = to_host(*be, plan.logits());
  plan.run(a);
  BOOST_TEST(to_host(*be, plan.logits()) == first);
  plan.run(b);
  BOOST_TEST(to_host(*be, plan.logits()) != first);
  plan.run(a);
  BOOST_TEST(to_host(*be, plan.logits()) == first);
  // The input is never written (a residual taken from it is copied, not accumulated into).
  Tensor a_again = input_for(*be, c, 4, 5);
  BOOST_TEST(to_host(*be, a) == to_host(*be, a_again));
}

BOOST_AUTO_TEST_CASE(a_model_without_heads_has_no_head_outputs) {
  auto be = backend::make_backend("ref", 1);
  auto model = model_for(kCases[0], *be);
  InferencePlan plan(*model);
  BOOST_CHECK_EXCEPTION(plan.head(Head::kPass), Error, [](const Error& e) {
    return std::string(e.what()).find("the model has no inspection heads") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
