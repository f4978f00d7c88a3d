// test_nn_model.cpp — the model zoo: oneDNN against the reference end to end, overfitting,
// determinism, gradient hooks and bound gradients, save/load, and the exact errors.
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/backend/profiled_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "temp_dir.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using namespace rt_test;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> labels_for(size_t n, int classes, uint64_t seed) {
  std::vector<float> r = random_values(n, seed, 0, float(classes));
  std::vector<int32_t> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = std::min(classes - 1, int32_t(r[i]));
  return labels;
}

std::string temp_path(const std::string& name) {
  const fs::path dir = rt_test::temp_root() / "nn";
  fs::create_directories(dir);
  return (dir / name).string();
}

// One forward, loss and backward of the same model and data on cpu and ref.
void check_model_against_reference(const std::string& name, const ModelInput& in, int classes,
                                   int batch, double tol) {
  std::printf("model %s, %dx%dx%d, batch %d: oneDNN vs reference\n", name.c_str(), in.channels,
              in.height, in.width, batch);
  auto cpu = backend::make_backend("cpu", 2), ref = backend::make_backend("ref", 1);
  auto m_cpu = make_model(name, in, classes, *cpu, 42),
       m_ref = make_model(name, in, classes, *ref, 42);
  Shape shape{batch, in.channels, in.height, in.width};
  Tensor x_cpu = random_tensor(*cpu, shape, 43), x_ref = random_tensor(*ref, shape, 43);
  std::vector<int32_t> labels = labels_for(size_t(batch), classes, 44);
  expect_close("logits (training)", *cpu, m_cpu->forward(x_cpu, true), *ref,
               m_ref->forward(x_ref, true), tol);
  LossResult l_cpu = m_cpu->loss(labels.data()), l_ref = m_ref->loss(labels.data());
  std::printf("  loss cpu %.6f ref %.6f\n", l_cpu.loss, l_ref.loss);
  BOOST_TEST(l_cpu.loss == l_ref.loss, boost::test_tools::tolerance(tol));
  m_cpu->backward();
  m_ref->backward();
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < m_cpu->parameters().size(); ++i) {
    const Parameter& a = *m_cpu->parameters()[i];
    const Parameter& b = *m_ref->parameters()[i];
    Diff d = diff(to_host(*cpu, a.grad), to_host(*ref, b.grad));
    BOOST_TEST(d.rel <= tol, a.name << " gradient: relative difference " << d.rel);
    if (d.rel > worst) worst = d.rel, worst_name = a.name;
  }
  std::printf("  %zu parameter gradients, worst relative difference %.3e (%s)\n",
              m_cpu->parameters().size(), worst, worst_name.c_str());
  expect_close("logits (inference)", *cpu, m_cpu->forward(x_cpu, false), *ref,
               m_ref->forward(x_ref, false), tol);
}

// Trains model on one fixed batch; returns the last loss and accuracy.
LossResult overfit(Model& model, const Tensor& x, const std::vector<int32_t>& labels, int steps,
                   double lr) {
  Optimizer sgd(model.parameters(), {0.9, false, 0.0, false}, model.backend());
  LossResult r;
  for (int s = 0; s < steps; ++s) {
    model.forward(x, true);
    r = model.loss(labels.data());
    model.backward();
    sgd.step(lr);
  }
  return r;
}

std::vector<std::vector<float>> weights_of(Model& m) {
  std::vector<std::vector<float>> w;
  for (Parameter* p : m.parameters()) w.push_back(to_host(m.backend(), p->value));
  for (const NamedBuffer& b : m.buffers()) w.push_back(to_host(m.backend(), *b.tensor));
  return w;
}

std::vector<std::vector<float>> grads_of(Model& m) {
  std::vector<std::vector<float>> g;
  for (Parameter* p : m.parameters()) g.push_back(to_host(m.backend(), p->grad));
  return g;
}

struct TransientRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads, weights;  // after the last step
  size_t step_peak = 0;  // bytes above the parameters, their gradients and momentum
};

// Three SGD steps of a fresh model (seed 42) on one batch, set up by `configure` (transient
// memory on or off, ...); the peak is the last step's, every tensor of the earlier ones made.
TransientRun run_three_steps(Backend& be, const std::string& name, const ModelInput& in,
                             int classes, int batch, const std::function<void(Model&)>& configure) {
  Tensor x = random_tensor(be, {batch, in.channels, in.height, in.width}, 43);
  std::vector<int32_t> labels = labels_for(size_t(batch), classes, 44);
  TransientRun run;
  auto model = make_model(name, in, classes, be, 42);
  configure(*model);
  Optimizer sgd(model->parameters(), {0.9, false, 0.0, false}, be);
  be.synchronize();
  const size_t before = be.memory_use().in_use;  // parameters, gradients, momentum
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {
      be.synchronize();
      be.reset_memory_peak();
    }
    model->forward(x, true);
    run.losses.push_back(model->loss(labels.data()).loss);
    model->backward();
    be.synchronize();
    if (step == 2) {
      run.step_peak = be.memory_use().peak - before;
      run.grads = grads_of(*model);
    }
    sgd.step(0.05);
  }
  run.weights = weights_of(*model);
  return run;
}

TransientRun run_transient(Backend& be, const std::string& name, const ModelInput& in, int classes,
                           int batch, bool transient) {
  return run_three_steps(be, name, in, classes, batch,
                         [&](Model& model) { model.set_transient_memory(transient); });
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

double max_relative(const std::vector<std::vector<float>>& got,
                    const std::vector<std::vector<float>>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, diff(got[i], want[i]).rel);
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_model)

BOOST_AUTO_TEST_CASE(cpu_matches_reference_for_every_model) {
  check_model_against_reference("cnn_small", {1, 8, 8}, 4, 3, 1e-4);
  check_model_against_reference("fibernet", {1, 16, 16}, 5, 4, 1e-3);
  check_model_against_reference("resnet18_cifar", {3, 8, 8}, 10, 4, 1e-3);
}

// cnn_small's pools run with their ReLUs as one op; the cpu backend's own loops
// (RINGTRAIN_CPU_POOL_RELU=fused, the default) and oneDNN's pool and ReLU
// (separate) only choose values, so three training steps give the same losses, gradients and
// weights to the bit.
BOOST_AUTO_TEST_CASE(cnn_small_trains_the_same_bits_with_its_pools_fused_or_separate) {
  TransientRun runs[2];
  const char* choices[2];
  for (int separate = 0; separate < 2; ++separate) {
    setenv("RINGTRAIN_CPU_POOL_RELU", separate ? "separate" : "fused", 1);
    auto be = backend::make_backend("cpu", 2);
    runs[separate] = run_three_steps(*be, "cnn_small", {1, 16, 16}, 10, 8, [](Model&) {});
    unsetenv("RINGTRAIN_CPU_POOL_RELU");
    const std::string op_choices = be->op_choices();
    choices[separate] =
        separate ? "max pool + ReLU: fused 0, oneDNN 2" : "max pool + ReLU: fused 2, oneDNN 0";
    BOOST_TEST(op_choices.rfind(choices[separate], 0) == 0, op_choices);
  }
  BOOST_TEST(runs[0].losses == runs[1].losses);
  BOOST_TEST(same_bits(runs[0].grads, runs[1].grads));
  BOOST_TEST(same_bits(runs[0].weights, runs[1].weights));
}

BOOST_AUTO_TEST_CASE(models_overfit_one_batch) {
  // One thread: hundreds of tiny steps would mostly time OpenMP barriers on a busy machine.
  auto be = backend::make_backend("cpu", 1);
  for (const char* name : {"cnn_small", "fibernet"}) {
    ModelInput in =
        std::string(name) == "cnn_small" ? ModelInput{1, 12, 12} : ModelInput{1, 16, 16};
    auto model = make_model(name, in, 5, *be, 7);
    Tensor x = random_tensor(*be, {16, in.channels, in.height, in.width}, 8);
    std::vector<int32_t> labels = labels_for(16, 5, 9);
    model->forward(x, true);
    double first = model->loss(labels.data()).loss;
    LossResult last = overfit(*model, x, labels, 150, 0.02);
    std::printf("%s overfits 16 images: loss %.4f -> %.6f, %lld/16 correct\n", name, first,
                last.loss, (long long)last.correct);
    BOOST_TEST(last.loss < 0.01);
    BOOST_TEST(last.correct == 16);
  }
}

BOOST_AUTO_TEST_CASE(same_seed_gives_bitwise_equal_weights_on_one_thread) {
  auto be = backend::make_backend("cpu", 1);
  Tensor x = random_tensor(*be, {8, 3, 8, 8}, 10);
  std::vector<int32_t> labels = labels_for(8, 10, 11);
  std::vector<std::vector<float>> runs[3];
  for (int run = 0; run < 3; ++run) {
    auto model = make_model("resnet18_cifar", {3, 8, 8}, 10, *be, run < 2 ? 5 : 6);
    overfit(*model, x, labels, 3, 0.05);
    runs[run] = weights_of(*model);
  }
  size_t equal = 0, differ_seed = 0;
  for (size_t i = 0; i < runs[0].size(); ++i) {
    equal += std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * 4) == 0;
    differ_seed += runs[0][i] != runs[2][i];
  }
  std::printf(
      "after 3 steps: %zu of %zu tensors bitwise equal with the same seed, %zu differ "
      "with another seed\n",
      equal, runs[0].size(), differ_seed);
  BOOST_TEST(equal == runs[0].size());
  // Weights differ with another seed (BN parameters start at 1 and 0 either way).
  BOOST_TEST(differ_seed > runs[0].size() / 2);
}

BOOST_AUTO_TEST_CASE(grad_ready_order_and_gradients_bound_to_external_memory) {
  auto be = backend::make_backend("cpu", 2);
  auto owned = make_model("fibernet", {1, 16, 16}, 5, *be, 3);
  auto bound = make_model("fibernet", {1, 16, 16}, 5, *be, 3);
  // One flat "fusion buffer" holding every gradient, in backward order.
  std::vector<float> fusion(size_t(bound->parameter_count()), -1.0f);
  size_t offset = 0;
  for (size_t i : bound->backward_order()) {
    bound->parameters()[i]->bind_grad(fusion.data() + offset);
    offset += size_t(bound->parameters()[i]->numel());
  }
  Tensor x = random_tensor(*be, {4, 1, 16, 16}, 4);
  std::vector<int32_t> labels = labels_for(4, 5, 5);
  std::vector<size_t> fired;
  for (Model* m : {owned.get(), bound.get()}) {
    m->forward(x, true);
    m->loss(labels.data());
  }
  owned->backward();
  bound->backward([&](size_t i) { fired.push_back(i); });
  BOOST_TEST(fired == bound->backward_order(), boost::test_tools::per_element());
  BOOST_TEST(fired.size() == bound->parameters().size());
  BOOST_TEST(bound->parameters()[fired.front()]->name == "fc.weight");
  BOOST_TEST(bound->parameters()[fired.back()]->name == "conv1.weight");
  offset = 0;
  size_t equal = 0;
  for (size_t i : bound->backward_order()) {
    std::vector<float> want = to_host(*be, owned->parameters()[i]->grad);
    equal += std::memcmp(want.data(), fusion.data() + offset, want.size() * 4) == 0;
    offset += want.size();
  }
  BOOST_TEST(equal == bound->parameters().size());
}

BOOST_AUTO_TEST_CASE(zoo_sizes_and_flops) {
  auto be = backend::make_backend("cpu", 2);
  auto cnn = make_model("cnn_small", {1, 28, 28}, 10, *be, 1);
  auto resnet = make_model("resnet18_cifar", {3, 32, 32}, 10, *be, 1);
  auto fiber = make_model("fibernet", {1, 64, 64}, 5, *be, 1);
  // PyTorch's counts for the same networks.
  BOOST_TEST(cnn->parameter_count() == 421642);
  BOOST_TEST(resnet->parameter_count() == 11173962);
  std::printf(
      "GFLOP per training image: cnn_small %.4f, resnet18_cifar %.3f, fibernet %.3f; "
      "fibernet has %lld parameters\n",
      cnn->train_flops_per_image() / 1e9, resnet->train_flops_per_image() / 1e9,
      fiber->train_flops_per_image() / 1e9, (long long)fiber->parameter_count());
  BOOST_TEST(resnet->train_flops_per_image() / 1e9 == 3.33, boost::test_tools::tolerance(0.01));
  BOOST_TEST(fiber->train_flops_per_image() > 0.05e9);
  BOOST_TEST(fiber->train_flops_per_image() < 0.3e9);
  BOOST_TEST(resnet->parameters()[0]->name == "conv1.weight");
  BOOST_TEST(resnet->parameters()[4]->name == "layer1.0.bn1.weight");
  BOOST_TEST(resnet->parameters()[4]->no_weight_decay);
  BOOST_TEST(!resnet->parameters()[0]->no_weight_decay);
}

BOOST_AUTO_TEST_CASE(initialisation_follows_pytorch_bounds) {
  auto be = backend::make_backend("cpu", 2);
  auto cnn = make_model("cnn_small", {1, 28, 28}, 10, *be, 1);
  for (Parameter* p : cnn->parameters()) {
    std::vector<float> v = to_host(*be, p->value);
    float bound = float(1.0 / std::sqrt(double(p->fan_in)));
    float lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    BOOST_TEST(lo >= -bound);
    BOOST_TEST(hi <= bound);
    // Filled out to near the bounds, not clustered at 0.
    BOOST_TEST(hi - lo > bound, p->name);
  }
  auto resnet = make_model("resnet18_cifar", {3, 32, 32}, 10, *be, 1);
  std::vector<float> gamma = to_host(*be, resnet->parameters()[1]->value);
  BOOST_TEST(resnet->parameters()[1]->name == "bn1.weight");
  BOOST_TEST(std::all_of(gamma.begin(), gamma.end(), [](float g) { return g == 1.0f; }));
}

BOOST_AUTO_TEST_CASE(save_load_round_trip_and_errors) {
  auto be = backend::make_backend("cpu", 2);
  auto model = make_model("fibernet", {1, 16, 16}, 5, *be, 11);
  Tensor x = random_tensor(*be, {4, 1, 16, 16}, 12);
  std::vector<int32_t> labels = labels_for(4, 5, 13);
  overfit(*model, x, labels, 2, 0.05);  // moves weights and BN running statistics
  std::string path = temp_path("model.h5");
  {
    auto file = h5::File::create(path);
    h5::Group g = file.root().create_group("model");
    model->save(g);
    file.close();
  }
  auto loaded = make_model("fibernet", {1, 16, 16}, 5, *be, 99);
  {
    auto file = h5::File::open_read(path);
    loaded->load(file.root().open_group("model"));
  }
  BOOST_TEST((weights_of(*loaded) == weights_of(*model)));
  std::vector<float> a = to_host(*be, model->forward(x, false));
  std::vector<float> b = to_host(*be, loaded->forward(x, false));
  BOOST_TEST(a == b, boost::test_tools::per_element());

  auto other_classes = make_model("fibernet", {1, 16, 16}, 3, *be, 1);
  auto file = h5::File::open_read(path);
  BOOST_TEST(error_of([&] { other_classes->load(file.root().open_group("model")); }) ==
             "file " + path +
                 ": tensor fc.weight has shape [5,128] but model fibernet needs "
                 "[3,128]");
  auto cnn = make_model("cnn_small", {1, 16, 16}, 5, *be, 1);
  BOOST_TEST(error_of([&] { cnn->load(file.root().open_group("model")); }) ==
             "file " + path +
                 ": tensor conv1.weight has shape [16,1,3,3] but model cnn_small "
                 "needs [32,1,3,3]");
  BOOST_TEST(error_of([&] { cnn->load(file.root()); }) ==
             "file " + path + ": / has no tensor conv1.weight for model cnn_small");
}

BOOST_AUTO_TEST_CASE(bad_names_and_shapes_give_exact_errors) {
  auto be = backend::make_backend("cpu", 1);
  BOOST_TEST(error_of([&] {
               make_model("vgg16", {3, 32, 32}, 10, *be, 1);
             }) == "unknown model 'vgg16': known models are cnn_small, resnet18_cifar, fibernet");
  BOOST_TEST(error_of([&] {
               make_model("cnn_small", {1, 30, 30}, 10, *be, 1);
             }) == "model cnn_small needs H and W divisible by 4; the data is 1x30x30");
  BOOST_TEST(error_of([&] {
               make_model("resnet18_cifar", {3, 4, 4}, 10, *be, 1);
             }) == "model resnet18_cifar needs H and W of at least 8; the data is 3x4x4");
  BOOST_TEST(error_of([&] {
               make_model("fibernet", {1, 8, 8}, 5, *be, 1);
             }) == "model fibernet needs H and W of at least 16; the data is 1x8x8");
  BOOST_CHECK_THROW(make_model("vgg16", {3, 32, 32}, 10, *be, 1), InputError);
  auto cnn = make_model("cnn_small", {1, 28, 28}, 10, *be, 1);
  Tensor wrong = random_tensor(*be, {2, 3, 28, 28}, 1);
  BOOST_TEST(error_of([&] {
               cnn->forward(wrong, true);
             }).find("model cnn_small: input [2,3,28,28] is not [N,1,28,28]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_new_batch_size_builds_new_primitives_and_keeps_the_old) {
  auto cpu = backend::make_backend("cpu", 2), ref = backend::make_backend("ref", 2);
  auto m_cpu = make_model("cnn_small", {1, 8, 8}, 3, *cpu, 2);
  auto m_ref = make_model("cnn_small", {1, 8, 8}, 3, *ref, 2);
  for (int batch : {4, 3, 4}) {
    Tensor xc = random_tensor(*cpu, {batch, 1, 8, 8}, 3 + batch);
    Tensor xr = random_tensor(*ref, {batch, 1, 8, 8}, 3 + batch);
    expect_close("logits at batch " + std::to_string(batch), *cpu, m_cpu->forward(xc, true), *ref,
                 m_ref->forward(xr, true), 1e-5);
  }
}

// Gradients given back once used (the cuda default) change no number: the same losses,
// gradients and weights, bitwise, as keeping every tensor. On cuda under train.deterministic:
// two fresh models otherwise pick their algorithms by timing, and three steps of a tiny
// ResNet (batch norm over 4 values a channel at 1x1) turn those differences into 0.75 in a
// gradient (seen on an H200). And the step's peak memory above the parameters falls: on ref,
// where every byte is counted, to at most `ratio` of the kept peak (measured, with each
// layer's forward tensors given back at the end of its backward: resnet18_cifar 0.16, fibernet
// 0.43, cnn_small 0.57; with the gradients alone given back they were 0.46, 0.63 and 0.76); on
// cuda, whose pool rounds blocks up to size classes, below it. On cuda
// one untimed run of the model comes first: the workspace cuDNN's algorithms need grows in a
// backend's first steps and stays, and the step peak is counted above what was in use before
// the model's first step, so the first run of a fresh backend would carry the workspace (7.5 MB
// of resnet18_cifar's heuristic algorithms at batch 4, against a 3.2 MB kept step, on an H200).
BOOST_AUTO_TEST_CASE(transient_memory_changes_no_number_and_lowers_the_peak) {
  struct Case {
    const char* model;
    ModelInput in;
    int classes, batch;
    double ratio;
  };
  const Case cases[] = {{"resnet18_cifar", {3, 8, 8}, 10, 4, 0.2},
                        {"cnn_small", {1, 8, 8}, 4, 3, 0.6},
                        {"fibernet", {1, 16, 16}, 5, 4, 0.45}};
  std::vector<std::string> backends{"ref"};
  if (cuda_testable()) backends.push_back("cuda");
  for (const std::string& name : backends) {
    backend::CudaOptions deterministic;
    deterministic.deterministic = true;
    auto be =
        name == "cuda" ? backend::make_cuda_backend(deterministic) : backend::make_backend(name, 2);
    BOOST_TEST(be->recycles_memory() == (name == "cuda"));
    for (const Case& c : cases) {
      if (name == "cuda") run_transient(*be, c.model, c.in, c.classes, c.batch, false);
      TransientRun dropped = run_transient(*be, c.model, c.in, c.classes, c.batch, true);
      TransientRun kept = run_transient(*be, c.model, c.in, c.classes, c.batch, false);
      const double grads = max_relative(dropped.grads, kept.grads);
      const double weights = max_relative(dropped.weights, kept.weights);
      std::printf(
          "%s %s batch %d: step peak %.1f KiB kept, %.1f KiB transient (%.2f); "
          "gradients %.1e, weights %.1e relative\n",
          name.c_str(), c.model, c.batch, kept.step_peak / 1024.0, dropped.step_peak / 1024.0,
          double(dropped.step_peak) / kept.step_peak, grads, weights);
      BOOST_TEST(same_bits(dropped.grads, kept.grads),
                 name << " " << c.model << ": gradients differ by " << grads);
      BOOST_TEST(same_bits(dropped.weights, kept.weights),
                 name << " " << c.model << ": weights differ by " << weights);
      BOOST_TEST(dropped.losses == kept.losses, name << " " << c.model << ": losses differ");
      const double bound = name == "ref" ? c.ratio : 1.0;
      BOOST_TEST(dropped.step_peak < bound * double(kept.step_peak),
                 name << " " << c.model << ": transient peak " << dropped.step_peak
                      << " bytes against " << kept.step_peak << " kept");
    }
  }
}

// In transient memory each layer gives back what its forward kept (its input, its output, its
// ops' saved state) at the end of its backward, as autograd frees a node's saved tensors once
// the node has run: after a backward, of all the forward and backward ops took (booked by kind
// through the profiled backend) only the batch statistics of fibernet's 12 batch norms (mean
// and variance, 64-byte blocks: 5,760 bytes) and the loss's gradient [4, 5] remain; the rest is
// what was made outside every op (parameters, gradients, the input). The same step with every
// tensor kept holds the activations under their ops' kinds.
BOOST_AUTO_TEST_CASE(transient_backward_gives_back_every_forward_tensor) {
  for (const bool transient : {true, false}) {
    BOOST_TEST_CONTEXT("transient " << transient) {
      auto be = backend::make_profiled_backend(backend::make_backend("ref", 1), nullptr);
      auto model = make_model("fibernet", {1, 16, 16}, 5, *be, 42);
      model->set_transient_memory(transient);
      Tensor x = random_tensor(*be, {4, 1, 16, 16}, 43);
      const std::vector<int32_t> labels = labels_for(4, 5, 44);
      be->reset_memory_peak();  // at_peak is then what is in use
      const backend::MemoryByTag start = be->memory_use().at_peak;
      model->forward(x, true);
      model->loss(labels.data());
      model->backward();
      be->reset_memory_peak();
      const backend::MemoryByTag end = be->memory_use().at_peak;
      size_t left = 0;
      for (int tag = 0; tag < backend::kOutsideOpsTag; ++tag) {
        const size_t added = end.bytes[size_t(tag)] - start.bytes[size_t(tag)];
        if (tag == int(backend::OpKind::kBatchNormForward)) {
          if (transient) BOOST_TEST(added == 5760u);
        } else if (tag == int(backend::OpKind::kLoss)) {
          BOOST_TEST(added == 128u);
        } else if (transient) {
          BOOST_TEST(added == 0u, backend::memory_tag_key(tag) << " holds " << added);
        }
        left += added;
      }
      // Kept, the conv outputs alone are more than a 16-channel 16x16 tensor of the batch.
      if (!transient) BOOST_TEST(left > size_t(4 * 16 * 16 * 16 * 4));
    }
  }
}

// In transient memory a parameter's gradient lives from its layer's backward to the next
// training forward after the optimizer step that read it (PyTorch's zero_grad(set_to_none=
// True)): the next forward holds exactly the parameters' gradients less than the step ended
// with (its activations are those of the step before, reused), its backward takes them again,
// a gradient bound into a fusion bucket stays, and micro-batches between steps keep theirs.
// The numbers are those of keeping every gradient (transient_memory_changes_no_number_...,
// and below for accumulation).
BOOST_AUTO_TEST_CASE(transient_gradients_live_from_backward_to_the_next_forward) {
  auto be = backend::make_backend("ref", 1);
  const ModelInput in{1, 16, 16};
  Tensor x = random_tensor(*be, {8, 1, 16, 16}, 43);
  const std::vector<int32_t> labels = labels_for(8, 5, 44);
  auto model = make_model("fibernet", in, 5, *be, 42);
  model->set_transient_memory(true);
  std::vector<Parameter*> params = model->parameters();
  std::vector<float> bucket(size_t(params.front()->numel()));
  params.front()->bind_grad(bucket.data());  // as a fusion bucket's slot
  Optimizer sgd(params, {0.9, false, 0.0, false}, *be);
  model->forward(x, true);
  const size_t first_forward = be->memory_use().in_use;
  model->loss(labels.data());
  model->backward();
  sgd.step(0.05);
  size_t owned = 0;
  for (const Parameter* p : params) {
    BOOST_TEST(!p->grad.empty(), p->name);
    BOOST_TEST(p->grad_consumed, p->name);
    if (p != params.front()) owned += (p->grad.bytes() + 63) / 64 * 64;  // host blocks of 64 B
  }
  // The next forward holds what the first did, less the gradients (made with the model) and
  // with the loss's gradient [8, 5] of the step before: the activations the backward gave
  // back made again, nothing else kept.
  model->forward(x, true);
  BOOST_TEST(be->memory_use().in_use == first_forward - owned + 192);
  for (const Parameter* p : params) BOOST_TEST(p->grad.empty() == (p != params.front()), p->name);
  model->loss(labels.data());
  model->backward();
  for (const Parameter* p : params) {
    BOOST_TEST(!p->grad.empty(), p->name);
    BOOST_TEST(!p->grad_consumed, p->name);
  }
  BOOST_TEST(params.front()->grad.raw() == static_cast<void*>(bucket.data()));

  // Two micro-batches a step: the second forward comes before any step, so the first
  // micro-batch's gradient stays and the sum is what keeping every gradient gives, bitwise.
  auto accumulated = [&](bool transient) {
    auto m = make_model("fibernet", in, 5, *be, 42);
    m->set_transient_memory(transient);
    Optimizer opt(m->parameters(), {0.9, false, 0.0, false}, *be);
    for (int step = 0; step < 2; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        m->forward(x, true);
        m->loss(labels.data());
        m->backward(nullptr, micro > 0);
      }
      opt.step(0.05);
    }
    return std::make_pair(grads_of(*m), weights_of(*m));
  };
  const auto transient = accumulated(true), kept = accumulated(false);
  BOOST_TEST(same_bits(transient.first, kept.first));
  BOOST_TEST(same_bits(transient.second, kept.second));
}

// The residual blocks' ReLU backward folded into the block above (Model::set_fold_relu_backward,
// the default) changes no number: three steps give the same losses, gradients and weights,
// bitwise, as every block running its own, in fp32 and bf16, with transient memory or not.
BOOST_AUTO_TEST_CASE(folded_relu_backward_changes_no_number) {
  // The bf16 reference is left to backend_ops, which holds its fused op to the formula.
  std::vector<std::pair<std::string, backend::Precision>> backends{
      {"ref", backend::Precision::kF32},
      {"cpu", backend::Precision::kF32},
      {"cpu", backend::Precision::kBF16}};
  if (cuda_testable()) {
    backends.push_back({"cuda", backend::Precision::kF32});
    backends.push_back({"cuda", backend::Precision::kBF16});
  }
  for (const auto& [name, precision] : backends) {
    // Deterministic: algorithms not chosen by timing (see above).
    auto be = backend_or_skip("folded relu backward", name, precision, true);
    if (!be) continue;
    for (const char* model : {"resnet18_cifar", "fibernet"}) {
      const ModelInput in =
          std::string(model) == "fibernet" ? ModelInput{1, 16, 16} : ModelInput{3, 8, 8};
      // The backend's own choice of transient memory; on cpu fp32 the other one as well.
      std::vector<bool> transients{be->recycles_memory()};
      if (name == "cpu" && precision == backend::Precision::kF32) transients.push_back(true);
      for (bool transient : transients) {
        auto with = [&](bool fold) {
          return run_three_steps(*be, model, in, 5, 4, [&](Model& m) {
            m.set_transient_memory(transient);
            m.set_fold_relu_backward(fold);
          });
        };
        const TransientRun folded = with(true), separate = with(false);
        const std::string what = name + " " + backend::precision_name(precision) + " " + model +
                                 (transient ? " transient" : "");
        std::printf("folded relu backward, %s: gradients %.1e, weights %.1e relative\n",
                    what.c_str(), max_relative(folded.grads, separate.grads),
                    max_relative(folded.weights, separate.weights));
        BOOST_TEST(folded.losses == separate.losses, what << ": losses differ");
        BOOST_TEST(same_bits(folded.grads, separate.grads), what << ": gradients differ");
        BOOST_TEST(same_bits(folded.weights, separate.weights), what << ": weights differ");
      }
    }
  }
}

// A training step recorded once (Backend::capture, on cuda one CUDA graph) and replayed is the
// step itself: two eager steps, the recording, three replays give the weights, gradients and
// batch-norm statistics of five eager steps, bitwise (cuda deterministic, fp32 and bf16). The
// host backends record nothing: capture is null there, and nothing of `work` runs.
BOOST_AUTO_TEST_CASE(a_recorded_step_replays_as_the_step_itself) {
  for (const char* name : {"ref", "cpu"}) {
    auto be = backend::make_backend(name, 1);
    bool ran = false;
    BOOST_TEST(!be->capture([&] { ran = true; }), name);
    BOOST_TEST(!ran, name);
  }
  if (!cuda_testable()) {
    std::printf("recorded step on cuda: skipped (%s)\n", backend::cuda_device_status().c_str());
    return;
  }
  for (backend::Precision precision : {backend::Precision::kF32, backend::Precision::kBF16}) {
    backend::CudaOptions options;
    options.deterministic = true;  // the same algorithms for both models (see above)
    options.precision = precision;
    auto be = backend::make_cuda_backend(options);
    for (const char* model_name : {"resnet18_cifar", "fibernet"}) {
      const ModelInput in =
          std::string(model_name) == "fibernet" ? ModelInput{1, 16, 16} : ModelInput{3, 8, 8};
      Tensor x = random_tensor(*be, {4, in.channels, in.height, in.width}, 43);
      const std::vector<int32_t> labels = labels_for(4, 5, 44);
      auto run = [&](bool recorded) {
        auto model = make_model(model_name, in, 5, *be, 42);
        Optimizer sgd(model->parameters(), {0.9, false, 5e-4, false}, *be);
        auto step = [&] {
          model->forward(x, true);
          model->loss_later(labels.data());
          model->backward();
          sgd.step(0.05);
        };
        for (int i = 0; i < 2; ++i) step();
        std::unique_ptr<backend::CapturedWork> graph;
        if (recorded) {
          graph = be->capture(step);
          BOOST_TEST_REQUIRE(bool(graph));
          BOOST_TEST(graph->operations() > 20u, "operations recorded: " << graph->operations());
        }
        for (int i = 0; i < 3; ++i) recorded ? graph->replay() : step();
        be->synchronize();
        TransientRun out;
        out.grads = grads_of(*model);
        out.weights = weights_of(*model);
        for (const auto& buffer : model->buffers())
          out.weights.push_back(to_host(*be, *buffer.tensor));
        return out;
      };
      const TransientRun eager = run(false), replayed = run(true);
      const std::string what = std::string(backend::precision_name(precision)) + " " + model_name;
      std::printf("recorded step, cuda %s: gradients %.1e, weights %.1e relative\n", what.c_str(),
                  max_relative(replayed.grads, eager.grads),
                  max_relative(replayed.weights, eager.weights));
      BOOST_TEST(same_bits(replayed.grads, eager.grads), what << ": gradients differ");
      BOOST_TEST(same_bits(replayed.weights, eager.weights),
                 what << ": weights or batch-norm statistics differ");
    }
  }
}

// The timed choices by convolution name (weight-gradient paths, and with conv_algorithm =
// measure the algorithms too): one per bias-free convolution once a step has run, taken back by
// a fresh model before any step (as a resumed run does), whose step then gives the timed one's
// very gradients; a choice for a name the model lacks named in the error.
BOOST_AUTO_TEST_CASE(weight_grad_choices_go_by_name_and_come_back) {
  const ModelInput in{1, 16, 16};
  for (auto algorithm : {backend::ConvAlgorithm::kDirect, backend::ConvAlgorithm::kMeasure}) {
    auto be = backend::make_backend("cpu", 2, backend::Precision::kF32,
                                    backend::ConvWeightGrad::kMeasure, algorithm);
    Tensor x = random_tensor(*be, {2, 1, 16, 16}, 91);
    std::vector<int32_t> labels = labels_for(2, 5, 92);
    const auto step = [&](Model& model) {
      model.forward(x, true);
      model.loss(labels.data());
      model.backward();
      std::vector<float> grads;
      for (Parameter* p : model.parameters()) {
        const std::vector<float> g = to_host(*be, p->grad);
        grads.insert(grads.end(), g.begin(), g.end());
      }
      return grads;
    };
    auto model = make_model("fibernet", in, 5, *be, 42);
    BOOST_TEST(model->weight_grad_choices() == "");  // nothing timed yet
    const std::vector<float> timed = step(*model);
    const std::string choices = model->weight_grad_choices();
    std::printf("fibernet, conv_algorithm %s: %s\n", backend::conv_algorithm_name(algorithm),
                choices.c_str());
    size_t convs = 0;  // every convolution weight is 4-D
    for (Parameter* p : model->parameters()) convs += p->shape.size() == 4;
    BOOST_TEST(size_t(std::count(choices.begin(), choices.end(), '=')) == convs);
    // An algorithm for each 3x3 stride-1 one: the stem, layer1's two, each later stage's conv2.
    size_t algorithms = 0;
    for (const char* token : {"winograd", "direct"})
      for (size_t at = choices.find(token); at != std::string::npos;
           at = choices.find(token, at + 1))
        ++algorithms;
    BOOST_TEST(algorithms == (algorithm == backend::ConvAlgorithm::kMeasure ? 6u : 0u));

    auto fresh = make_model("fibernet", in, 5, *be, 42);
    fresh->preset_weight_grad_choices(choices, "test");
    BOOST_TEST(fresh->weight_grad_choices() == choices);
    BOOST_TEST(same_bits(step(*fresh), timed));
    BOOST_TEST(
        error_of([&] { fresh->preset_weight_grad_choices("stem.conv9=gemm", "deck.key"); }) ==
        "deck.key: weight-gradient choice for stem.conv9, which model fibernet has no "
        "convolution of");
    BOOST_TEST(error_of([&] { fresh->preset_weight_grad_choices("gemm", "deck.key"); }) ==
               "deck.key: weight-gradient choice 'gemm' is not name=path");
  }
}

BOOST_AUTO_TEST_SUITE_END()
