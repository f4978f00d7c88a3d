// rt-export.cpp — a trained model out of ringtrain: its network as ONNX (opset 13, through
// ONNX's own library and checker), with what inference needs as metadata, and its weights as
// a PyTorch state_dict file.
//
//   rt-export --model output/checkpoints/run.ckpt.h5 --onnx model.onnx --torch model.pt
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "export/onnx_export.hpp"
#include "export/torch_export.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"

namespace po = boost::program_options;
using namespace ringtrain;

namespace {

const char* const kAbout =
    "rt-export: a model file (the checkpoint a ringtrain training run writes) as ONNX.\n"
    "The ONNX graph takes \"input\" float [batch, C, H, W], normalised as its metadata says\n"
    "((pixel / 255 - mean) / std per channel), and gives \"logits\" and \"probabilities\"\n"
    "(softmax) [batch, classes]; batch norm is kept (BatchNormalization, inference), ReLU,\n"
    "pooling, residual Add and Gemm as the network computes them. Metadata: model, heads,\n"
    "input_shape, mean, std, normalization, class_names, source, global_step.\n"
    "--torch writes the weights as a torch.save state_dict whose keys are ringtrain's\n"
    "parameter names: the models of tools/bench_compute_torch.py load it with strict=True.\n"
    "At least one of --onnx and --torch.\n\nOptions";

struct Options {
  std::string model, onnx, torch, weights = "averaged";
};

Options parse(int argc, char** argv, bool& help) {
  Options o;
  po::options_description desc(kAbout);
  desc.add_options()("help,h", "this text")(
      "model", po::value(&o.model)->value_name("FILE")->required(), "the model file (checkpoint)")(
      "onnx", po::value(&o.onnx)->value_name("FILE"), "the ONNX file to write")(
      "torch", po::value(&o.torch)->value_name("FILE"), "the PyTorch state_dict file to write")(
      "weights", po::value(&o.weights)->value_name("WHICH")->default_value(o.weights),
      "averaged: the run's moving average of the weights where it kept one (train.ema_decay), "
      "else its weights; raw: its weights");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  help = vm.count("help") > 0;
  if (help) {
    std::cout << desc << "\n";
    return o;
  }
  po::notify(vm);
  if (o.onnx.empty() && o.torch.empty())
    throw InputError("nothing to write: give --onnx FILE, --torch FILE or both");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool help = false;
    const Options o = parse(argc, argv, help);
    if (help) return kExitOk;
    const nn::ModelFile file(o.model);
    const nn::ModelWeights weights = nn::parse_model_weights(o.weights, "--weights");
    const std::unique_ptr<backend::Backend> ref = backend::make_backend("ref", 1);  // exact fp32
    const std::unique_ptr<nn::Model> net = file.build_model(*ref, weights);
    const std::string what = str(o.model, " (", file.card().model, ", step ", file.global_step(),
                                 file.averaged(weights) ? ", averaged weights" : "", ")");
    if (!o.onnx.empty()) {
      const int nodes = tools::write_onnx(file, *net, o.onnx);
      std::printf("rt-export: %s -> %s: %d ONNX nodes, opset 13, checked\n", what.c_str(),
                  o.onnx.c_str(), nodes);
    }
    if (!o.torch.empty()) {
      const int entries = tools::write_torch_state_dict(file, *net, o.torch);
      std::printf("rt-export: %s -> %s: a state_dict of %d tensors\n", what.c_str(),
                  o.torch.c_str(), entries);
    }
    return kExitOk;
  } catch (const po::error& e) {
    std::fprintf(stderr, "rt-export: error: %s (see rt-export --help)\n", e.what());
    return kExitBadInput;
  } catch (const InputError& e) {
    std::fprintf(stderr, "rt-export: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rt-export: error: %s\n", e.what());
    return kExitFailure;
  }
}
