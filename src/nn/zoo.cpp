// zoo.cpp — the models chosen by model.name: cnn_small, resnet18_cifar, fibernet.
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {
namespace {

std::string chw(const ModelInput& in) {
  return str(in.channels, "x", in.height, "x", in.width);
}

// conv3x3 C->32, ReLU, maxpool 2, conv3x3 32->64, ReLU, maxpool 2, linear ->128, ReLU,
// linear ->classes. Max-pooling and ReLU commute (both are monotone), so each ReLU runs
// after its pool, on a quarter of the values: the same function and gradient, less work; each
// pool and its ReLU run as one op (MaxPoolReLU), which the cpu backend fuses.
std::unique_ptr<Sequential> cnn_small(const ModelInput& in, int classes, Backend& be) {
  RT_REQUIRE_INPUT(in.height % 4 == 0 && in.width % 4 == 0 && in.height > 0 && in.width > 0,
                   "model cnn_small needs H and W divisible by 4; the data is ", chw(in));
  auto net = std::make_unique<Sequential>("");
  net->add(std::make_unique<Conv2d>("conv1", be, in.channels, 32, 3, 1, 1, true));
  net->add(std::make_unique<MaxPoolReLU>("pool1", "relu1", be, 2));
  net->add(std::make_unique<Conv2d>("conv2", be, 32, 64, 3, 1, 1, true));
  net->add(std::make_unique<MaxPoolReLU>("pool2", "relu2", be, 2));
  net->add(std::make_unique<Flatten>("flatten"));
  net->add(
      std::make_unique<Linear>("fc1", be, int64_t(64) * (in.height / 4) * (in.width / 4), 128));
  net->add(std::make_unique<ReLU>("relu3", be));
  net->add(std::make_unique<Linear>("fc2", be, 128, classes));
  return net;
}

// Stages of BasicBlocks; the first block of every stage but the first halves H and W.
void add_stages(Sequential& net, Backend& be, int in_c, const std::vector<int>& widths,
                const std::vector<int>& blocks) {
  for (size_t s = 0; s < widths.size(); ++s)
    for (int b = 0; b < blocks[s]; ++b) {
      int stride = (s > 0 && b == 0) ? 2 : 1;
      std::string name = str("layer", s + 1, ".", b);
      net.add(std::make_unique<BasicBlock>(name, be, in_c, widths[s], stride));
      in_c = widths[s];
    }
}

void add_head(Sequential& net, Backend& be, int features, int classes) {
  net.add(global_avg_pool("avgpool", be));
  net.add(std::make_unique<Flatten>("flatten"));
  net.add(std::make_unique<Linear>("fc", be, features, classes));
}

// ResNet-18 for 32x32 images: a 3x3 stem without max-pool, [2,2,2,2] blocks.
std::unique_ptr<Sequential> resnet18_cifar(const ModelInput& in, int classes, Backend& be) {
  RT_REQUIRE_INPUT(in.height >= 8 && in.width >= 8,
                   "model resnet18_cifar needs H and W of at least 8; the data is ", chw(in));
  auto net = std::make_unique<Sequential>("");
  net->add(std::make_unique<Conv2d>("conv1", be, in.channels, 64, 3, 1, 1, false));
  net->add(std::make_unique<BatchNorm2d>("bn1", be, 64, true));  // with the ReLU
  add_stages(*net, be, 64, {64, 128, 256, 512}, {2, 2, 2, 2});
  add_head(*net, be, 512, classes);
  return net;
}

// A small ResNet for 64x64 grayscale end faces: full-resolution stem, max-pool 2, one
// BasicBlock per stage at 16-32-64-128 (stride 2 from the second): about 0.1 GFLOP per
// training image.
std::unique_ptr<Sequential> fibernet(const ModelInput& in, int classes, Backend& be) {
  RT_REQUIRE_INPUT(in.height >= 16 && in.width >= 16,
                   "model fibernet needs H and W of at least 16; the data is ", chw(in));
  auto net = std::make_unique<Sequential>("");
  net->add(std::make_unique<Conv2d>("conv1", be, in.channels, 16, 3, 1, 1, false));
  net->add(std::make_unique<BatchNormReluMaxPool>("bn1", "maxpool", be, 16, 2));
  add_stages(*net, be, 16, {16, 32, 64, 128}, {1, 1, 1, 1});
  add_head(*net, be, 128, classes);
  return net;
}

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"cnn_small", "resnet18_cifar", "fibernet"};
  return names;
}

std::unique_ptr<Model> make_model(const std::string& name, const ModelInput& in, int classes,
                                  Backend& be, uint64_t seed, const HeadsSpec& heads) {
  RT_REQUIRE_INPUT(in.channels >= 1 && in.height >= 1 && in.width >= 1, "model ", name,
                   ": the data shape ", chw(in), " is empty");
  RT_REQUIRE_INPUT(classes >= 2, "model ", name, " needs at least 2 classes, the data has ",
                   classes);
  std::unique_ptr<Sequential> net;
  if (name == "cnn_small") {
    net = cnn_small(in, classes, be);
  } else if (name == "resnet18_cifar") {
    net = resnet18_cifar(in, classes, be);
  } else if (name == "fibernet") {
    net = fibernet(in, classes, be);
  } else {
    std::ostringstream known;
    for (size_t i = 0; i < model_names().size(); ++i) known << (i ? ", " : "") << model_names()[i];
    throw InputError(str("unknown model '", name, "': known models are ", known.str()));
  }
  auto model = std::make_unique<Model>(name, be, in, classes, std::move(net), heads);
  init_parameters(*model, seed);
  return model;
}

}  // namespace ringtrain::nn
