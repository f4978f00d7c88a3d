// rt-bench-compute.cpp — training throughput of one model on the CPU backend or one GPU
// (forward, loss, backward, SGD), or with --inference the throughput of ringtrain predict's step
// (the model's InferencePlan, logits to the host), in timed windows after warm-up; one JSON
// line per window set.
//
//   rt-bench-compute --model cnn_small --batch 64 --threads 2 [--input 1x28x28]
//                    [--classes 10] [--warmup 3] [--windows 5] [--steps 5] [--precision bf16]
//                    [--backend cuda]   (GPU 0; --precision fp32, bf16, fp16 or tf32)
//   rt-bench-compute --peak --threads 2 --precision bf16   (a matmul and a conv: the machine's
//   limit; oneDNN only)
//   rt-bench-compute --model resnet18_cifar --profile   (also the timed steps' time by op kind:
//   a table on stderr and "profile" in the JSON line)
//   rt-bench-compute --backend cuda --model resnet18_cifar --memory-map   (how the timed steps'
//   memory peak splits by the kind of op that took each tensor: "memory_at_peak")
//   rt-bench-compute --model resnet18_cifar --conv-weight-grad measure   (train.conv_weight_grad;
//   the JSON line names what each convolution took)
//   rt-bench-compute --model resnet18_cifar --relu-backward separate   (every residual block
//   runs its own ReLU backward: the baseline of the folded default)
//   rt-bench-compute --backend cuda --model resnet18_cifar --cuda-graph   (the training step
//   recorded once as a CUDA graph after the warm-up, each timed step one replay of it)
// tools/bench-compute.sh runs it beside PyTorch and prints the table.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <vector>

#include "bench/bench.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/backend/peak.hpp"
#include "ringtrain/backend/profiled_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/nn/inference_plan.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"

using namespace ringtrain;
namespace po = boost::program_options;

namespace {

std::string str_fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

nn::ModelInput parse_input(const std::string& text) {
  nn::ModelInput in;
  char x1 = 0, x2 = 0;
  std::istringstream s(text);
  s >> in.channels >> x1 >> in.height >> x2 >> in.width;
  RT_REQUIRE_INPUT(s && x1 == 'x' && x2 == 'x' && s.peek() == EOF, "--input ", text,
                   ": expected CxHxW, e.g. 3x32x32");
  return in;
}

// The backend to time: cpu (oneDNN), or cuda where a GPU is visible; anything else, or cuda
// without a GPU, is one InputError line naming the value and CUDA's reason.
std::unique_ptr<backend::Backend> make_timed_backend(const std::string& name, int threads,
                                                     backend::Precision precision,
                                                     backend::ConvWeightGrad weight_grad,
                                                     backend::ConvAlgorithm conv_algorithm) {
  RT_REQUIRE_INPUT(name == "cpu" || name == "cuda", "--backend ", name, ": expected cpu or cuda");
  if (name == "cuda")
    RT_REQUIRE_INPUT(backend::cuda_device_count() > 0, "--backend cuda: no GPU (",
                     backend::cuda_device_status(), ")");
  return backend::make_backend(name, threads, precision, weight_grad, conv_algorithm);
}

// MiB of device memory, "null" where tensors live on the host.
std::string device_mib(const backend::MemoryUse& memory, size_t bytes) {
  return memory.device ? str_fixed(double(bytes) / (1 << 20), 1) : "null";
}

// MiB of host tensor memory, "null" where tensors live on a device.
std::string host_mib(const backend::MemoryUse& memory, size_t bytes) {
  return memory.device ? "null" : str_fixed(double(bytes) / (1 << 20), 1);
}

// The bytes a step holds whatever its activations: every parameter, its gradient (fp32, which
// transient memory holds from its layer's backward to the next forward only) and the
// optimizer's moments.
size_t state_bytes(nn::Model& model, const nn::Optimizer& optimizer) {
  size_t bytes = 0;
  for (const nn::Parameter* p : model.parameters())
    bytes += p->value.bytes() + size_t(p->numel()) * sizeof(float);
  for (const auto* moments : {&optimizer.first_moments(), &optimizer.second_moments()})
    for (const backend::Tensor& m : *moments) bytes += m.bytes();
  return bytes;
}

// The profile of `steps` timed steps that took `wall` seconds: a table on stderr (per step:
// milliseconds, share, calls, GFLOP/s of the products) and the same as a JSON object, with
// "between_ms" the step's time outside every op (the framework's own work and waits).
std::string print_profile(const backend::OpProfile& p, int64_t steps, double wall) {
  const double step_ms = 1e3 * wall / double(steps);
  std::ostringstream json;
  json.setf(std::ios::fixed);
  json.precision(4);
  json << "{\"step_ms\":" << step_ms;
  std::fprintf(stderr, "per step (%lld steps, %.2f ms each):\n%-20s %9s %6s %6s %9s\n",
               static_cast<long long>(steps), step_ms, "op", "ms", "share", "calls", "GFLOP/s");
  for (int k = 0; k < backend::kOpKinds; ++k) {
    if (p.calls[size_t(k)] == 0) continue;
    const double ms = 1e3 * p.seconds[size_t(k)] / double(steps);
    const double gflops =
        p.seconds[size_t(k)] > 0 ? p.flops[size_t(k)] / p.seconds[size_t(k)] / 1e9 : 0;
    const char* key = backend::op_kind_key(backend::OpKind(k));
    std::fprintf(stderr, "%-20s %9.3f %5.1f%% %6.1f %9s\n", key, ms, 100 * ms / step_ms,
                 double(p.calls[size_t(k)]) / double(steps),
                 p.flops[size_t(k)] > 0 ? str_fixed(gflops, 1).c_str() : "");
    json << ",\"" << key << "_ms\":" << ms;
    if (p.flops[size_t(k)] > 0) json << ",\"" << key << "_gflops\":" << gflops;
  }
  const double between = step_ms - 1e3 * p.total_seconds() / double(steps);
  std::fprintf(stderr, "%-20s %9.3f %5.1f%%\n", "between ops", between, 100 * between / step_ms);
  json << ",\"between_ms\":" << between << "}";
  return json.str();
}

// How the timed steps' memory peak was split by the kind of op that took each tensor (the
// cuDNN workspace and memory taken outside every op apart), largest first: a table on stderr
// and a JSON object {"conv_fwd": {"mib": .., "blocks": ..}, ...} of the tags that held any.
std::string print_memory_map(const backend::MemoryUse& memory) {
  const backend::MemoryByTag& split = memory.at_peak;
  std::vector<int> tags;
  for (int t = 0; t < backend::kMemoryTags; ++t)
    if (split.bytes[size_t(t)] > 0) tags.push_back(t);
  std::stable_sort(tags.begin(), tags.end(),
                   [&](int a, int b) { return split.bytes[size_t(a)] > split.bytes[size_t(b)]; });
  const auto mib = [](size_t bytes) { return double(bytes) / (1 << 20); };
  std::fprintf(stderr, "memory at the timed steps' peak (%.1f MiB, %s):\n%-20s %9s %6s %7s\n",
               mib(memory.peak),
               memory.device ? "device bytes asked for" : "every host tensor of the process",
               "taken by", "MiB", "share", "blocks");
  std::ostringstream json;
  json << '{';
  for (size_t i = 0; i < tags.size(); ++i) {
    const size_t t = size_t(tags[i]);
    const char* key = backend::memory_tag_key(tags[i]);
    std::fprintf(stderr, "%-20s %9.1f %5.1f%% %7zu\n", key, mib(split.bytes[t]),
                 memory.peak > 0 ? 100.0 * double(split.bytes[t]) / double(memory.peak) : 0.0,
                 split.blocks[t]);
    json << (i ? "," : "") << '"' << key << "\":{\"mib\":" << str_fixed(mib(split.bytes[t]), 3)
         << ",\"blocks\":" << split.blocks[t] << '}';
  }
  json << '}';
  return json.str();
}

// What train.conv_weight_grad = measure timed for each convolution, as a JSON object
// {"name": [weight gradient by oneDNN ms, by matmul ms, input gradient by oneDNN's backward-data
// kernel ms, by the forward kernel ms], ...} (0 where a path was not timed; null when nothing
// was), and as a table on stderr.
std::string weight_grad_times_json(nn::Model& model) {
  const auto times = model.weight_grad_times();
  if (times.empty()) return "null";
  auto faster = [](double a, double b, const char* a_name, const char* b_name) {
    return a > 0 && b > 0 ? (a < b ? a_name : b_name) : "-";
  };
  std::ostringstream json;
  std::fprintf(stderr,
               "backward paths, ms a pass (measure's medians):\n%-28s %9s %9s %-7s %9s %9s  %s\n",
               "convolution", "dW oneDNN", "matmul", "took", "dx oneDNN", "forward", "took");
  for (size_t i = 0; i < times.size(); ++i) {
    const auto& [name, t] = times[i];
    std::fprintf(stderr, "%-28s %9.3f %9.3f %-7s %9.3f %9.3f  %s\n", name.c_str(), t.onednn_ms,
                 t.gemm_ms, faster(t.onednn_ms, t.gemm_ms, "oneDNN", "matmul"), t.data_onednn_ms,
                 t.data_forward_ms,
                 faster(t.data_onednn_ms, t.data_forward_ms, "oneDNN", "forward"));
    json << (i ? "," : "{") << "\"" << name << "\":[" << str_fixed(t.onednn_ms, 4) << ","
         << str_fixed(t.gemm_ms, 4) << "," << str_fixed(t.data_onednn_ms, 4) << ","
         << str_fixed(t.data_forward_ms, 4) << "]";
  }
  json << "}";
  return json.str();
}

int run(int argc, char** argv) {
  std::string model_name, input_text, precision_text, backend_name, weight_grad_text, relu_backward,
      conv_algorithm_text;
  int batch = 64, threads = 1, classes = 10, warmup = 3, windows = 5, steps = 5;
  po::options_description opts("rt-bench-compute options");
  opts.add_options()("help,h", "print this help and exit")(
      "model", po::value(&model_name)->default_value("cnn_small"),
      "cnn_small, resnet18_cifar, fibernet")(
      "input", po::value(&input_text), "CxHxW (default: 1x28x28 for cnn_small, else 3x32x32)")(
      "batch", po::value(&batch)->default_value(64), "images per step")(
      "threads", po::value(&threads)->default_value(1), "OpenMP threads")(
      "classes", po::value(&classes)->default_value(10), "classes")(
      "warmup", po::value(&warmup)->default_value(3), "untimed steps first")(
      "windows", po::value(&windows)->default_value(5), "timed windows")(
      "steps", po::value(&steps)->default_value(5), "steps per window")(
      "precision", po::value(&precision_text)->default_value("fp32"),
      "fp32 or bf16 (cuda: also fp16, tf32)")(
      "backend", po::value(&backend_name)->default_value("cpu"), "cpu or cuda (GPU 0)")(
      "conv-weight-grad", po::value(&weight_grad_text)->default_value("onednn"),
      "cpu: convolution weight gradients by onednn, gemm or measure (train.conv_weight_grad)")(
      "conv-algorithm", po::value(&conv_algorithm_text)->default_value("auto"),
      "cpu: 3x3 stride-1 fp32 convolutions by auto's rule, direct or winograd kernels, or "
      "measure (train.conv_algorithm)")(
      "relu-backward", po::value(&relu_backward)->default_value("folded"),
      "folded (a residual block masks its input gradient with the ReLU below as it sums it) "
      "or separate (each block runs its own ReLU backward)")(
      "inference",
      "time inference as ringtrain predict runs it: forward with BN's running statistics, the "
      "logits downloaded; no loss, backward or optimizer")(
      "profile",
      "time every op of the timed steps by kind (each op waits for its queue to empty: on a GPU "
      "the rate drops) and print where a step's time goes")(
      "memory-map",
      "book the tensor memory each op takes under its kind (no op waits, unlike --profile) and "
      "print how the timed steps' peak splits between them; --profile does this too")(
      "profile-step",
      "after the windows, one more step inside a CUDA profiler range (run under ncu "
      "--profile-from-start off: that step's kernels alone)")(
      "peak",
      "time a 2048^3 matmul and a 64-channel 3x3 convolution in this precision instead of a "
      "model (gflops: the faster)")(
      "cuda-graph",
      "cuda: record the training step once after the warm-up as a CUDA graph and time its "
      "replays (one host call a step; the same step, learning rate and batch each time)");
  po::variables_map vm;
  if (!bench::parse_command_line(argc, argv, opts, vm, "rt-bench-compute [options]"))
    return kExitOk;
  RT_REQUIRE_INPUT(batch > 0 && windows > 0 && steps > 0 && warmup >= 0,
                   "--batch, --windows and --steps must be > 0 and --warmup >= 0");
  RT_REQUIRE_INPUT(relu_backward == "folded" || relu_backward == "separate",
                   "--relu-backward is folded or separate, not '", relu_backward, "'");
  if (vm.count("peak")) {
    RT_REQUIRE_INPUT(backend_name == "cpu",
                     "--peak times oneDNN on the CPU; there is no GPU "
                     "peak (leave out --backend ",
                     backend_name, ")");
    const auto precision = backend::parse_precision(precision_text);
    const double matmul = backend::matmul_peak_gflops(precision, threads);
    const double conv = backend::conv_peak_gflops(precision, threads);
    std::printf(
        "{\"tool\":\"peak\",\"threads\":%d,\"precision\":\"%s\",\"gflops\":%.2f,"
        "\"matmul_gflops\":%.2f,\"conv_gflops\":%.2f}\n",
        threads, precision_text.c_str(), std::max(matmul, conv), matmul, conv);
    return 0;
  }
  const bool cuda_graph = vm.count("cuda-graph") > 0;
  RT_REQUIRE_INPUT(!cuda_graph || (!vm.count("inference") && !vm.count("profile")),
                   "--cuda-graph records the training step: leave out --inference and --profile "
                   "(a profile waits for every op, which a recording cannot)");
  if (input_text.empty()) input_text = model_name == "cnn_small" ? "1x28x28" : "3x32x32";
  nn::ModelInput in = parse_input(input_text);

  auto be = make_timed_backend(backend_name, threads, backend::parse_precision(precision_text),
                               backend::parse_conv_weight_grad(weight_grad_text),
                               backend::parse_conv_algorithm(conv_algorithm_text));
  std::shared_ptr<backend::OpProfile> profile;
  if (vm.count("profile")) profile = std::make_shared<backend::OpProfile>();
  const bool memory_map = profile || vm.count("memory-map");
  if (memory_map) be = backend::make_profiled_backend(std::move(be), profile);
  auto model = nn::make_model(model_name, in, classes, *be, 1);
  model->set_fold_relu_backward(relu_backward == "folded");
  nn::Optimizer sgd(model->parameters(), {0.9, false, 5e-4, false}, *be);
  std::mt19937 rng(7);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> host(size_t(batch) * in.channels * in.height * in.width);
  for (float& v : host) v = pixel(rng);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int32_t& l : labels) l = int32_t(rng() % unsigned(classes));
  backend::Tensor x = be->alloc({batch, in.channels, in.height, in.width});
  be->upload(host.data(), x);

  // The loss is not read: a GPU queues the whole step without a host stop (the windows end
  // with synchronize()), as PyTorch does when nobody calls loss.item().
  const bool inference = vm.count("inference") > 0;
  std::vector<float> logits(size_t(batch) * size_t(classes));
  std::unique_ptr<nn::InferencePlan> plan;
  if (inference) plan = std::make_unique<nn::InferencePlan>(*model);
  auto step = [&] {
    if (inference) {
      plan->run(x);
      be->download(plan->logits(), logits.data());
      return;
    }
    model->forward(x, true);
    model->loss_later(labels.data());
    model->backward();
    sgd.step(0.01);
  };
  for (int i = 0; i < warmup; ++i) step();
  be->synchronize();
  const backend::MemoryUse setup_memory = be->memory_use();
  // The timed steps' own peak beside the whole run's; with --cuda-graph the recording's, as
  // its replays take no memory of their own.
  be->reset_memory_peak();
  // After the warm-up every algorithm is chosen and every tensor made: the step records whole.
  std::unique_ptr<backend::CapturedWork> graph;
  if (cuda_graph) {
    graph = be->capture(step);
    RT_REQUIRE_INPUT(graph != nullptr, "--cuda-graph: the ", be->name(),
                     " backend runs each op as it is called and records nothing (use --backend "
                     "cuda)");
    graph->replay();  // the recorded step once untimed, as the warm-up ran the eager one
    be->synchronize();
  }
  auto timed_step = [&] { graph ? graph->replay() : step(); };
  if (profile) profile->clear();
  std::vector<double> rates;
  const bench::OtherCpu others;
  const double wall0 = now_seconds();
  for (int w = 0; w < windows; ++w) {
    Stopwatch watch;
    for (int i = 0; i < steps; ++i) timed_step();
    be->synchronize();
    rates.push_back(double(batch) * steps / watch.seconds());
  }
  double wall = now_seconds() - wall0;
  const backend::OpProfile timed = profile ? *profile : backend::OpProfile{};  // the windows'
  if (vm.count("profile-step")) {
    backend::cuda_profiler_range(true);
    timed_step();
    be->synchronize();
    backend::cuda_profiler_range(false);
  }
  const double other_cores = others.cores(wall);
  double img_s = median(rates);
  const double flops =
      inference ? model->forward_flops_per_image() : model->train_flops_per_image();
  std::ostringstream windows_json;
  for (size_t i = 0; i < rates.size(); ++i) windows_json << (i ? "," : "") << rates[i];
  // Device memory beside PyTorch's max_memory_allocated (null where tensors live on the host):
  // the most the tensors asked for at once during the timed steps, and since the start
  // (algorithm searches and all); and the timed steps' peak in the pool's blocks.
  const backend::MemoryUse memory = be->memory_use();
  const std::string gpu_peak_mib = device_mib(memory, memory.peak);
  const std::string gpu_peak_run_mib = device_mib(memory, std::max(memory.peak, setup_memory.peak));
  const std::string gpu_pool_peak_mib = device_mib(memory, memory.block_peak);
  // What those peaks hold beside the activations: the largest cuDNN workspace one call took in
  // the timed steps (held for the whole step with RINGTRAIN_CUDA_WORKSPACE=kept), and the
  // parameters, gradients and optimizer state.
  const std::string gpu_workspace_mib = device_mib(memory, memory.workspace_peak);
  const std::string state_mib = str_fixed(double(state_bytes(*model, sgd)) / (1 << 20), 1);
  // On the host backends, the timed steps' peak of every tensor in host memory (the model's
  // activations and gradients kept from step to step; oneDNN's own scratch not counted).
  const std::string host_peak_mib = host_mib(memory, memory.peak);
  const std::string profile_json =
      profile ? print_profile(timed, int64_t(windows) * steps, wall) : "null";
  const std::string memory_map_json = memory_map ? print_memory_map(memory) : "null";
  // One more training step, untimed: the tensor memory in use once forward and the loss have
  // run (the activations backward will read, beside the state), as bench_compute_torch.py
  // measures PyTorch's; device memory only.
  std::string gpu_after_forward_mib = "null";
  if (memory.device && !inference && !graph) {
    model->forward(x, true);
    model->loss_later(labels.data());
    be->synchronize();
    gpu_after_forward_mib = device_mib(memory, be->memory_use().in_use);
    model->backward();
    sgd.step(0.01);
    be->synchronize();
  }
  const std::string weight_grad_ms = weight_grad_times_json(*model);
  // The recorded step's operations (kernels, copies): null without --cuda-graph.
  const std::string graph_json = graph ? str("{\"operations\":", graph->operations(), "}") : "null";
  std::printf(
      "{\"tool\":\"%s\",\"mode\":\"%s\",\"backend\":\"%s\",\"model\":\"%s\","
      "\"input\":\"%dx%dx%d\",\"batch\":%d,\"threads\":%d,"
      "\"precision\":\"%s\",\"isa\":\"%s\",\"img_s\":%.3f,\"windows\":[%s],\"gflop_per_image\":%."
      "6f,"
      "\"gflops\":%.2f,\"other_cores\":%.3f,\"gpu_peak_mib\":%s,\"gpu_peak_run_mib\":%s,"
      "\"gpu_pool_peak_mib\":%s,\"gpu_workspace_mib\":%s,\"host_peak_mib\":%s,"
      "\"state_mib\":%s,\"gpu_after_forward_mib\":%s,\"memory_at_peak\":%s,"
      "\"conv_weight_grad\":\"%s\",\"conv_algorithm\":\"%s\",\"relu_backward\":\"%s\","
      "\"op_choices\":\"%s\",\"weight_grad_ms\":%s,\"cuda_graph\":%s,\"profile\":%s}\n",
      profile ? "ringtrain-profile" : "ringtrain", inference ? "inference" : "train",
      be->name().c_str(), model_name.c_str(), in.channels, in.height, in.width, batch, threads,
      precision_text.c_str(), be->instruction_set().c_str(), img_s, windows_json.str().c_str(),
      flops / 1e9, img_s * flops / 1e9, other_cores, gpu_peak_mib.c_str(), gpu_peak_run_mib.c_str(),
      gpu_pool_peak_mib.c_str(), gpu_workspace_mib.c_str(), host_peak_mib.c_str(),
      state_mib.c_str(), gpu_after_forward_mib.c_str(), memory_map_json.c_str(),
      weight_grad_text.c_str(), conv_algorithm_text.c_str(), relu_backward.c_str(),
      be->op_choices().c_str(), weight_grad_ms.c_str(), graph_json.c_str(), profile_json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_bench("rt-bench-compute", [&] { return run(argc, argv); });
}
