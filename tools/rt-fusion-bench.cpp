// rt-fusion-bench.cpp — how much of the gradient reduction the fusion engine hides behind a
// synthetic backward pass: ResNet-18 (CIFAR) gradient shapes, a busy loop per layer standing in
// for its backward, MPI_Allreduce as the reduction; overlap on and off against no reduction.
//
//   mpirun -np 2 bin/rt-fusion-bench [--steps 8] [--backward-ms 300] [--fusion-mib 16]
//   (or the three by position; 16 MiB is the trainer's default)
// Prints a table of medians (rank 0) and appends JSON lines to output/bench/fusion.jsonl.
#define OMPI_SKIP_MPICXX 1  // C bindings only: the C++ ones warn under -Wextra
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::comm;
using namespace ringtrain::comm::fusion;
namespace po = boost::program_options;

namespace {

// ResNet-18 for 32x32 inputs, in the order backward produces the gradients (last layer first).
std::vector<GradSpec> resnet18_gradients() {
  std::vector<GradSpec> forward;
  auto conv_bn = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    forward.push_back({name + ".weight", {out, in, k, k}});
    forward.push_back({name + ".bn.weight", {out}});
    forward.push_back({name + ".bn.bias", {out}});
  };
  conv_bn("conv1", 64, 3, 3);
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    int64_t out = 64 << stage;
    for (int block = 0; block < 2; ++block) {
      std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      conv_bn(name + ".conv1", out, block == 0 ? in : out, 3);
      conv_bn(name + ".conv2", out, out, 3);
      if (block == 0 && in != out) conv_bn(name + ".downsample", out, in, 1);
    }
    in = out;
  }
  forward.push_back({"fc.weight", {10, 512}});
  forward.push_back({"fc.bias", {10}});
  return {forward.rbegin(), forward.rend()};
}

size_t numel(const GradSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= size_t(d);
  return n;
}

// Real floating-point work (so the comm thread competes with it for the core) for `seconds`.
float busy_compute(double seconds) {
  static float scratch[4096];
  float acc = 0;
  double end = Timeline::now() + seconds;
  do {
    for (int i = 0; i < 4096; ++i) {
      scratch[i] = scratch[i] * 0.999f + 0.001f;
      acc += scratch[i];
    }
  } while (Timeline::now() < end);
  return acc;
}

struct Result {
  std::string mode;
  double step_s, backward_s, wait_s, allreduce_s;
};

Result run(const Communicator& world, const std::string& mode, int steps, double backward_s,
           double fusion_mib) {
  // MPI_Allreduce (then the division), on a communicator of its own.
  auto mpi = allreduce::make_allreducer(world, allreduce::Algorithm::mpi, {});
  bool reduce = mode != "no reduction";
  ReduceFn fn = [&](float* data, size_t count, float divisor) {
    if (reduce) mpi->sum_and_divide(data, count, divisor);
  };
  FusionOptions options;
  options.fusion_mib = fusion_mib;
  options.overlap = mode != "overlap off";
  auto specs = resnet18_gradients();
  size_t total = 0;
  for (const auto& s : specs) total += numel(s);
  std::vector<double> step, backward, wait, allreduce;
  {
    FusionEngine engine(world, fn, options);
    auto where = engine.plan(specs);
    volatile float sink = 0;
    for (int s = -1; s < steps; ++s) {  // step -1 warms up
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = Timeline::now();
      for (size_t i = 0; i < specs.size(); ++i) {
        sink = sink + busy_compute(backward_s * double(numel(specs[i])) / double(total));
        std::fill(where[i], where[i] + numel(specs[i]), 1.0f);
        engine.enqueue(i);
      }
      double t1 = Timeline::now();
      engine.synchronize();
      double t2 = Timeline::now();
      if (s < 0) continue;
      step.push_back(t2 - t0);
      backward.push_back(t1 - t0);
      wait.push_back(engine.last_wait_seconds());
      allreduce.push_back(engine.last_allreduce_seconds());
    }
  }
  return {mode, median(step), median(backward), median(wait), median(allreduce)};
}

int bench_main(int argc, char** argv) {
  int steps = 8;
  double backward_ms = 300, fusion_mib = kDefaultFusionMib;
  po::options_description desc("rt-fusion-bench options (also taken by position, in this order)");
  desc.add_options()("help,h", "print this help and exit")(
      "steps", po::value(&steps)->default_value(steps), "timed steps per mode")(
      "backward-ms", po::value(&backward_ms)->default_value(backward_ms), "synthetic backward, ms")(
      "fusion-mib", po::value(&fusion_mib)->default_value(fusion_mib),
      "bucket size cap, MiB (the trainer's default)");
  po::positional_options_description order;
  order.add("steps", 1).add("backward-ms", 1).add("fusion-mib", 1);
  po::variables_map vm;
  if (!bench::parse_command_line(argc, argv, desc, vm, "mpirun -np N rt-fusion-bench [options]",
                                 &order))
    return int(kExitOk);
  const Communicator communicator;
  const int rank = communicator.rank(), world = communicator.size();
  const double backward_s = backward_ms / 1000;

  double wall0 = Timeline::now(), busy0 = bench::cpu_times().machine_busy_s;
  std::vector<Result> results;
  for (const char* mode : {"no reduction", "overlap on", "overlap off"})
    results.push_back(run(communicator, mode, steps, backward_s, fusion_mib));
  // CPU the machine spent beyond what our ranks could use (world busy loops at most).
  double cores = double(sysconf(_SC_NPROCESSORS_ONLN));
  double busy = (bench::cpu_times().machine_busy_s - busy0) / (Timeline::now() - wall0);
  bool crowded = double(world) > cores || busy > cores * 0.95;

  if (rank == 0) {
    const Result& ref = results[0];
    std::printf(
        "fusion engine, ResNet-18 gradients (44.7 MB), synthetic backward %.0f ms, %d ranks, "
        "fusion %.0f MiB, MPI_Allreduce, median of %d steps%s\n",
        backward_s * 1e3, world, fusion_mib, steps,
        crowded ? "  [CROWDED: more ranks than cores or a busy machine]" : "");
    std::printf("| %-12s | %8s | %11s | %8s | %12s | %12s | %14s |\n", "mode", "step ms",
                "backward ms", "wait ms", "allreduce ms", "exposed comm", "x no-reduction");
    std::printf(
        "|--------------|----------|-------------|----------|--------------|--------------|"
        "----------------|\n");
    std::filesystem::create_directories("output/bench");
    std::ofstream jsonl("output/bench/fusion.jsonl", std::ios::app);
    for (const Result& r : results) {
      double exposed = r.allreduce_s > 0 ? r.wait_s / r.allreduce_s : 0.0;
      std::printf("| %-12s | %8.1f | %11.1f | %8.1f | %12.1f | %11.0f%% | %14.3f |\n",
                  r.mode.c_str(), r.step_s * 1e3, r.backward_s * 1e3, r.wait_s * 1e3,
                  r.allreduce_s * 1e3, exposed * 100, r.step_s / ref.step_s);
      jsonl << "{\"bench\":\"fusion\",\"model\":\"resnet18_cifar_gradients\",\"ranks\":" << world
            << ",\"mode\":\"" << r.mode << "\",\"backward_ms\":" << backward_s * 1e3
            << ",\"fusion_mib\":" << fusion_mib << ",\"step_ms\":" << r.step_s * 1e3
            << ",\"wait_ms\":" << r.wait_s * 1e3 << ",\"allreduce_ms\":" << r.allreduce_s * 1e3
            << ",\"exposed_comm\":" << exposed
            << ",\"ratio_to_no_reduction\":" << r.step_s / ref.step_s
            << ",\"machine_busy_cores\":" << busy << ",\"crowded\":" << (crowded ? "true" : "false")
            << "}\n";
    }
    std::printf(
        "exposed comm = wait in synchronize() / summed allreduce time; machine busy %.2f of "
        "%.0f cores (JSON lines in output/bench/fusion.jsonl)\n",
        busy, cores);
  }
  return int(kExitOk);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int code = bench::run_bench("rt-fusion-bench", [&] { return bench_main(argc, argv); });
  MPI_Finalize();
  return code;
}
