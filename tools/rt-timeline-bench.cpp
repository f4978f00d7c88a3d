// rt-timeline-bench.cpp — what the timeline costs: ns per span against the two clock reads a
// caller needs anyway, the engine's enqueue() with the timeline off and on, and the writer.
// Ratios use the calling thread's CPU time, which other processes on a shared machine do not
// inflate; wall time is printed beside it.
//
//   mpirun -np 1 bin/rt-timeline-bench [--spans 1000000] [--repeats 9] (or both by position)
// Prints a table of medians and writes JSON lines to output/bench/timeline.jsonl.
#define OMPI_SKIP_MPICXX 1  // C bindings only: the C++ ones warn under -Wextra
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"

using namespace ringtrain::comm;
using namespace ringtrain::comm::fusion;
using ringtrain::kExitOk;
using ringtrain::median;
using ringtrain::thread_cpu_seconds;
namespace bench = ringtrain::bench;
namespace po = boost::program_options;

namespace {

// Median ns per call of body(i) over `repeats` runs of n calls, in wall time and in this
// thread's CPU time (the cost to the calling thread, robust to other processes taking turns).
struct Cost {
  double wall_ns;
  double cpu_ns;
};
Cost ns_per_call(size_t n, int repeats, const std::function<void()>& setup,
                 const std::function<void(size_t)>& body) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    setup();
    double w0 = Timeline::now(), c0 = thread_cpu_seconds();
    for (size_t i = 0; i < n; ++i) body(i);
    cpu.push_back((thread_cpu_seconds() - c0) / double(n) * 1e9);
    wall.push_back((Timeline::now() - w0) / double(n) * 1e9);
  }
  return {median(wall), median(cpu)};
}

struct Row {
  std::string name;
  Cost cost;
};

int bench_main(int argc, char** argv) {
  size_t spans = 1000000;
  int repeats = 9;
  po::options_description desc("rt-timeline-bench options (also taken by position, in this order)");
  desc.add_options()("help,h", "print this help and exit")(
      "spans", po::value(&spans)->default_value(spans), "calls per measurement")(
      "repeats", po::value(&repeats)->default_value(repeats), "measurements per case");
  po::positional_options_description order;
  order.add("spans", 1).add("repeats", 1);
  po::variables_map vm;
  if (!bench::parse_command_line(argc, argv, desc, vm, "mpirun -np 1 rt-timeline-bench [options]",
                                 &order))
    return int(kExitOk);
  const Communicator world;  // the engine below runs alone when this runs as one process
  const bench::OtherCpu other_cpu;
  double wall0 = Timeline::now();

  std::vector<Row> rows;
  volatile double sink = 0;
  rows.push_back({"two clock reads (reference)", ns_per_call(
                                                     spans, repeats, [] {},
                                                     [&](size_t) {
                                                       double t0 = Timeline::now();
                                                       sink = sink + (Timeline::now() - t0);
                                                     })});
  std::unique_ptr<Timeline> timeline;
  rows.push_back({"clock reads + span, timeline off",
                  ns_per_call(
                      spans, repeats, [&] { timeline = std::make_unique<Timeline>(false, 0); },
                      [&](size_t) {
                        double t0 = Timeline::now();
                        timeline->span("backward conv1", "compute", t0, Timeline::now());
                      })});
  rows.push_back(
      {"clock reads + span, timeline on",
       ns_per_call(
           spans, repeats, [&] { timeline = std::make_unique<Timeline>(true, 0, spans); },
           [&](size_t) {
             double t0 = Timeline::now();
             timeline->span("backward conv1", "compute", t0, Timeline::now());
           })});
  rows.push_back(
      {"span alone, timeline on (with args)",
       ns_per_call(
           spans, repeats, [&] { timeline = std::make_unique<Timeline>(true, 0, spans); },
           [&](size_t i) {
             timeline->span("allreduce bucket 0", "comm", 1.0, 2.0, 1, {"bytes", int64_t(i)},
                            {"tensors", 3});
           })});

  // The engine's enqueue() on one rank, 64 gradients a step, timeline off and on.
  std::vector<GradSpec> specs;
  for (int i = 0; i < 64; ++i) specs.push_back({"layer" + std::to_string(i) + ".weight", {64, 64}});
  for (bool on : {false, true}) {
    Timeline engine_timeline(on, 0);
    FusionEngine engine(
        world, [](float*, size_t, float) {}, FusionOptions{}, &engine_timeline);
    engine.plan(specs);
    size_t steps = std::max<size_t>(1, spans / 64 / 10);
    std::vector<double> wall, cpu;
    for (int r = 0; r < repeats; ++r) {
      double wall_s = 0, cpu_s = 0;
      for (size_t s = 0; s < steps; ++s) {
        double w0 = Timeline::now(), c0 = thread_cpu_seconds();
        for (size_t i = 0; i < specs.size(); ++i) engine.enqueue(i);
        cpu_s += thread_cpu_seconds() - c0;
        wall_s += Timeline::now() - w0;
        engine.synchronize();
      }
      wall.push_back(wall_s / double(steps * specs.size()) * 1e9);
      cpu.push_back(cpu_s / double(steps * specs.size()) * 1e9);
    }
    rows.push_back({on ? "engine enqueue(), timeline on" : "engine enqueue(), timeline off",
                    {median(wall), median(cpu)}});
  }

  // The writer: format and write every span once.
  std::string path = "output/bench/timeline-bench-trace.json";
  timeline = std::make_unique<Timeline>(true, 0, spans);
  for (size_t i = 0; i < spans; ++i) timeline->span("backward conv1", "compute", 1.0, 1.0 + 1e-6);
  double w0 = Timeline::now(), c0 = thread_cpu_seconds();
  timeline->write_chrome_trace(world, path);
  rows.push_back({"write_chrome_trace, per span",
                  {(Timeline::now() - w0) / double(spans) * 1e9,
                   (thread_cpu_seconds() - c0) / double(spans) * 1e9}});
  std::filesystem::remove(path);

  double wall = Timeline::now() - wall0;
  double others = other_cpu.cores(wall);
  bool busy = others > 0.25;
  double reference = rows[0].cost.cpu_ns;
  std::printf("timeline overhead: %zu spans x %d repeats, medians%s\n", spans, repeats,
              busy ? "  [BUSY machine]" : "");
  std::printf("other processes used %.2f cores while this ran\n", others);
  std::printf("| %-38s | %8s | %8s | %13s |\n", "case", "wall ns", "CPU ns", "x clock reads");
  std::printf("|%s|%s|%s|%s|\n", std::string(40, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(15, '-').c_str());
  std::filesystem::create_directories("output/bench");
  std::ofstream jsonl("output/bench/timeline.jsonl", std::ios::app);
  for (const Row& row : rows) {
    double ratio = row.cost.cpu_ns / reference;
    std::printf("| %-38s | %8.1f | %8.1f | %13.2f |\n", row.name.c_str(), row.cost.wall_ns,
                row.cost.cpu_ns, ratio);
    jsonl << "{\"bench\":\"timeline\",\"case\":\"" << row.name
          << "\",\"wall_ns_per_call\":" << row.cost.wall_ns
          << ",\"cpu_ns_per_call\":" << row.cost.cpu_ns << ",\"ratio_to_clock_reads\":" << ratio
          << ",\"spans\":" << spans << ",\"repeats\":" << repeats
          << ",\"other_cores_busy\":" << others << ",\"busy_machine\":" << (busy ? "true" : "false")
          << "}\n";
  }
  std::printf("(JSON lines appended to output/bench/timeline.jsonl)\n");
  return int(kExitOk);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int code = bench::run_bench("rt-timeline-bench", [&] { return bench_main(argc, argv); });
  MPI_Finalize();
  return code;
}
