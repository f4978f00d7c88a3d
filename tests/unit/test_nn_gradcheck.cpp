// test_nn_gradcheck.cpp — finite-difference gradient checks of every layer (reference backend,
// and the CUDA backend where a GPU is).
//
// For L = sum(r * layer(x)) with fixed random r, the layer's backward(r) must match central
// differences (L(v+eps) - L(v-eps)) / 2eps for inputs and parameters. Values live in fp32,
// so eps is 1e-2 (rounding noise ~1e-6/eps stays far below the tolerance) except where a
// ReLU kink could sit within eps of an input; inputs of ReLU and max-pool are kept away
// from their kinks (|x| >= 0.1, maxima separated by more than 2 eps).
#include <algorithm>
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <numeric>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using namespace rt_test;
namespace bdata = boost::unit_test::data;

namespace {

struct Tolerance {
  double eps = 1e-2;
  double abs = 5e-4;
  double rel = 5e-3;
};

double weighted_sum(Backend& be, const Tensor& y, const std::vector<float>& r) {
  std::vector<float> yh = to_host(be, y);
  double s = 0;
  for (size_t i = 0; i < yh.size(); ++i) s += double(yh[i]) * r[i];
  return s;
}

// Compares analytic[k] with the central difference of loss() over host[k], for up to
// 48 evenly spread k; set(host) writes the perturbed values back to the device.
void check_coordinates(const std::string& what, std::vector<float>& host,
                       const std::vector<float>& analytic, const std::function<void()>& set,
                       const std::function<double()>& loss, const Tolerance& tol) {
  size_t n = host.size(), step = std::max<size_t>(1, n / 48);
  double worst_excess = -1, max_err = 0;
  for (size_t k = 0; k < n; k += step) {
    float saved = host[k];
    host[k] = saved + float(tol.eps);
    set();
    double plus = loss();
    host[k] = saved - float(tol.eps);
    set();
    double minus = loss();
    host[k] = saved;
    set();
    // The perturbation actually applied, after rounding to fp32.
    double h = (double(saved + float(tol.eps)) - double(saved - float(tol.eps)));
    double fd = (plus - minus) / h, an = analytic[k];
    double err = std::fabs(fd - an);
    max_err = std::max(max_err, err);
    worst_excess = std::max(worst_excess, err - (tol.abs + tol.rel * std::fabs(an)));
    BOOST_TEST(err <= tol.abs + tol.rel * std::fabs(an),
               what << "[" << k << "]: analytic " << an << ", finite difference " << fd);
  }
  std::printf("  %-40s %zu of %zu checked, max |fd - analytic| %.2e\n", what.c_str(),
              (n + step - 1) / step, n, max_err);
}

// The gradient check of one layer on input x (host values xv).
void grad_check(const std::string& name, Layer& layer, Backend& be, const Shape& x_shape,
                std::vector<float> xv, const Tolerance& tol = {}) {
  std::printf("gradient check (%s): %s, x %s\n", be.name().c_str(), name.c_str(),
              shape_str(x_shape).c_str());
  Tensor x = to_device(be, x_shape, xv);
  Shape y_shape = layer.forward(x, true).shape();
  BOOST_TEST((y_shape == layer.output_shape(x_shape)));
  std::vector<float> r = random_values(size_t(backend::shape_numel(y_shape)), 1234);
  auto loss = [&] { return weighted_sum(be, layer.forward(x, true), r); };

  layer.forward(x, true);
  Tensor dy = to_device(be, y_shape, r);
  std::vector<Parameter*> params;
  std::vector<NamedBuffer> buffers;
  layer.collect(params, buffers);
  size_t ready_calls = 0;
  std::vector<float> dx = to_host(be, layer.backward(dy, [&](Parameter&) { ++ready_calls; }));
  BOOST_TEST(ready_calls == params.size());
  std::vector<std::vector<float>> grads;
  for (Parameter* p : params) grads.push_back(to_host(be, p->grad));

  check_coordinates(
      name + " dx", xv, dx, [&] { be.upload(xv.data(), x); }, loss, tol);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> value = to_host(be, params[i]->value);
    check_coordinates(
        params[i]->name, value, grads[i], [&] { be.upload(value.data(), params[i]->value); }, loss,
        tol);
  }
}

// Random parameters (layers start with PyTorch's init only through make_model).
void randomize(Layer& layer, Backend& be, uint64_t seed) {
  std::vector<Parameter*> params;
  std::vector<NamedBuffer> buffers;
  layer.collect(params, buffers);
  for (Parameter* p : params) {
    bool scale = p->role == ParamRole::kNormScale;
    std::vector<float> v =
        random_values(size_t(p->numel()), seed++, scale ? 0.5f : -0.5f, scale ? 1.5f : 0.5f);
    be.upload(v.data(), p->value);
  }
}

// Values with |v| >= 0.1: no ReLU kink within eps.
std::vector<float> away_from_zero(size_t n, uint64_t seed) {
  std::vector<float> v = random_values(n, seed, 0.1f, 1.0f), sign = random_values(n, seed + 1);
  for (size_t i = 0; i < n; ++i) v[i] *= sign[i] < 0 ? -1.0f : 1.0f;
  return v;
}

// A shuffled ladder with steps of 0.05: every pool window has a clear maximum.
std::vector<float> distinct(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * float(i);
  std::vector<float> keys = random_values(n, seed);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = v[order[i]];
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_gradcheck)

BOOST_DATA_TEST_CASE(conv2d, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  Conv2d plain("conv", *be, 3, 4, 3, 1, 1, true);
  randomize(plain, *be, 1);
  grad_check("conv 3x3 pad 1 + bias", plain, *be, {2, 3, 5, 5}, random_values(150, 2));
  Conv2d strided("conv_s2", *be, 2, 3, 3, 2, 1, false);
  randomize(strided, *be, 3);
  grad_check("conv 3x3 stride 2", strided, *be, {2, 2, 6, 6}, random_values(144, 4));
  Conv2d pointwise("conv_1x1", *be, 4, 2, 1, 2, 0, false);
  randomize(pointwise, *be, 5);
  grad_check("conv 1x1 stride 2", pointwise, *be, {1, 4, 5, 5}, random_values(100, 6));
}

BOOST_DATA_TEST_CASE(conv2d_with_fused_relu, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  Conv2d conv("conv_relu", *be, 2, 3, 3, 1, 1, true, true);
  randomize(conv, *be, 7);
  // A kink could sit within eps of a pre-activation: smaller eps, looser absolute bound.
  grad_check("conv + fused relu", conv, *be, {2, 2, 4, 4}, random_values(64, 8),
             {1e-3, 2e-3, 1e-2});
}

BOOST_DATA_TEST_CASE(batch_norm_training, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  BatchNorm2d bn("bn", *be, 3);
  randomize(bn, *be, 9);
  grad_check("batch norm (training)", bn, *be, {3, 3, 3, 3}, random_values(81, 10, -1, 2));
  BatchNorm2d bn_relu("bn_relu", *be, 3, true);
  randomize(bn_relu, *be, 9);
  grad_check("batch norm + fused relu", bn_relu, *be, {3, 3, 3, 3}, random_values(81, 10, -1, 2),
             {1e-3, 2e-3, 1e-2});
  BatchNormReluMaxPool stem("bn", "pool", *be, 3, 2);
  randomize(stem, *be, 9);
  grad_check("batch norm + relu + max pool", stem, *be, {2, 3, 4, 4}, distinct(96, 12),
             {1e-3, 2e-3, 1e-2});
}

BOOST_DATA_TEST_CASE(relu_and_pools, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  ReLU relu("relu", *be);
  grad_check("relu", relu, *be, {2, 3, 4, 4}, away_from_zero(96, 11));
  auto maxp = max_pool2d("maxpool", *be, 2, 2);
  grad_check("max pool 2", *maxp, *be, {2, 2, 4, 4}, distinct(64, 12));
  auto maxp3 = max_pool2d("maxpool3", *be, 3, 2, 1);
  grad_check("max pool 3 stride 2 pad 1", *maxp3, *be, {1, 2, 5, 5}, distinct(50, 13));
  auto avgp = avg_pool2d("avgpool", *be, 3, 2, 1);
  grad_check("avg pool 3 stride 2 pad 1", *avgp, *be, {2, 2, 5, 5}, random_values(100, 14));
  auto gap = global_avg_pool("gap", *be);
  grad_check("global avg pool", *gap, *be, {2, 3, 3, 3}, random_values(54, 15));
}

BOOST_DATA_TEST_CASE(linear_and_flatten, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  Linear fc("fc", *be, 12, 5);
  randomize(fc, *be, 16);
  grad_check("linear", fc, *be, {3, 12}, random_values(36, 17));
  Sequential flat_fc("");
  flat_fc.add(std::make_unique<Flatten>("flatten"));
  flat_fc.add(std::make_unique<Linear>("fc4d", *be, 12, 4));
  randomize(flat_fc, *be, 18);
  grad_check("flatten + linear", flat_fc, *be, {2, 3, 2, 2}, random_values(24, 19));
}

BOOST_DATA_TEST_CASE(basic_block, bdata::make(gradcheck_backends()), backend_name) {
  auto be = backend::make_backend(backend_name, 2);
  BasicBlock same("block", *be, 3, 3, 1);
  randomize(same, *be, 20);
  grad_check("basic block (identity shortcut)", same, *be, {2, 3, 4, 4}, random_values(96, 21),
             {1e-3, 2e-3, 1e-2});
  BasicBlock down("block_down", *be, 2, 4, 2);
  randomize(down, *be, 22);
  grad_check("basic block (1x1 conv + bn shortcut)", down, *be, {2, 2, 6, 6},
             random_values(144, 23), {1e-3, 2e-3, 1e-2});
}

BOOST_DATA_TEST_CASE(whole_model_with_loss, bdata::make(gradcheck_backends()), backend_name) {
  // Model, Sequential and the loss together. A network without kinks (ReLU and max-pool
  // are checked above on inputs kept off their kinks; inside a network they cannot be).
  auto be = backend::make_backend(backend_name, 2);
  auto net = std::make_unique<Sequential>("");
  net->add(std::make_unique<Conv2d>("conv", *be, 2, 4, 3, 1, 1, true));
  net->add(std::make_unique<BatchNorm2d>("bn", *be, 4));
  net->add(avg_pool2d("pool", *be, 2, 2));
  net->add(std::make_unique<Flatten>("flatten"));
  net->add(std::make_unique<Linear>("fc", *be, 16, 3));
  Model model("smooth", *be, {2, 4, 4}, 3, std::move(net));
  init_parameters(model, 24);
  Tensor x = random_tensor(*be, {3, 2, 4, 4}, 25);
  int32_t labels[3] = {2, 0, 1};
  auto loss = [&] {
    model.forward(x, true);
    return model.loss(labels).loss;
  };
  loss();
  model.backward();
  std::printf("gradient check: conv, bn, avg pool, linear + softmax cross-entropy\n");
  for (Parameter* p : model.parameters()) {
    std::vector<float> grad = to_host(*be, p->grad), value = to_host(*be, p->value);
    check_coordinates(p->name, value, grad, [&] { be->upload(value.data(), p->value); }, loss,
                      {1e-2, 1e-4, 5e-3});
  }
}

BOOST_DATA_TEST_CASE(inspect_heads_with_losses, bdata::make(gradcheck_backends()), backend_name) {
  // model.heads = inspect: the classifier and the defect, pass and zone heads on one feature
  // vector, softmax cross-entropy + weighted BCEs; every parameter, the backbone's included
  // (its gradient is the sum over the four heads).
  auto be = backend::make_backend(backend_name, 2);
  auto net = std::make_unique<Sequential>("");
  net->add(std::make_unique<Conv2d>("conv", *be, 2, 4, 3, 1, 1, true));
  net->add(avg_pool2d("pool", *be, 2, 2));
  net->add(std::make_unique<Flatten>("flatten"));
  net->add(std::make_unique<Linear>("fc", *be, 16, 3));
  Model model("smooth", *be, {2, 4, 4}, 3, std::move(net), {Heads::kInspect, 5});
  init_parameters(model, 31);
  std::vector<std::string> names;
  for (Parameter* p : model.parameters()) names.push_back(p->name);
  const std::vector<std::string> want{
      "conv.weight",         "conv.bias",         "fc.weight",        "fc.bias",
      "head_defects.weight", "head_defects.bias", "head_pass.weight", "head_pass.bias",
      "head_zones.weight",   "head_zones.bias"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  Tensor x = random_tensor(*be, {3, 2, 4, 4}, 32);
  int32_t labels[3] = {1, 2, 0};
  const std::vector<float> defects{1, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1}, pass{1, 0, 0},
      zones{1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1};
  const InspectTargets targets{defects.data(), pass.data(), zones.data()};
  const InspectWeights weights{0.7f, 2.0f, 1.3f};
  auto loss = [&] {
    model.forward(x, true);
    return model.loss(labels).loss + model.inspect_loss(targets, weights).weighted(weights);
  };
  loss();
  size_t ready = 0;
  model.backward([&](size_t) { ++ready; });
  BOOST_TEST(ready == model.parameters().size());
  std::printf("gradient check: conv, avg pool, classifier + defect, pass and zone heads\n");
  for (Parameter* p : model.parameters()) {
    std::vector<float> grad = to_host(*be, p->grad), value = to_host(*be, p->value);
    check_coordinates(p->name, value, grad, [&] { be->upload(value.data(), p->value); }, loss,
                      {1e-2, 1e-4, 5e-3});
  }
}

BOOST_AUTO_TEST_SUITE_END()
