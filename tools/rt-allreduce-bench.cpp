// rt-allreduce-bench.cpp — nccl-tests style allreduce benchmark: ours (ring, rhd, auto) vs
// MPI_Allreduce (and the hierarchical variant) per size, against the ring-link bound, with
// #wrong checked exactly.
//
// defines: options, CPU taken by others on each node (bench/bench.hpp), the timed loops, the
// table, HDF5 + JSON lines.
// Each timing is the slowest rank's time for one iteration; a row reports the median over
// iterations. busbw = algbw * 2(n-1)/n (what one rank sends, nccl-tests' convention).
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/cpu_share.hpp"
#include "ringtrain/comm/link_probe.hpp"
#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/timer.hpp"
#include "ringtrain/io/h5.hpp"

using namespace ringtrain;
namespace po = boost::program_options;

namespace {

// Each size moves at most this many bytes per algorithm (but at least kMinIters iterations).
constexpr double kBytesPerSize = 2.0 * (1 << 30);
constexpr int kMinIters = 5;

struct BenchOptions {
  size_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int iters = 50, warmup = 3;
  std::vector<comm::allreduce::Algorithm> algorithms;
  comm::allreduce::AllreduceOptions allreduce;  // the first chunk size and depth of the lists below
  std::vector<size_t> chunk_sizes;  // ring/hierarchical: one contender per (chunk, depth)
  std::vector<int> depths;
  std::vector<int> post_all;   // 1/0 for AllreduceOptions::post_all_ready
  std::vector<int> shm;        // 1/0 for AllreduceOptions::shared_memory
  bool shared_buckets = true;  // the buffer in auto's shared buckets, as the trainer's buckets
  std::string output_dir = "output/bench";
  double busy_threshold = 0.10;
  bool fastest = false;  // report the fastest iteration instead of the median (for tuning)
};

// "4K", "256M", "1G" or plain bytes (binary units).
size_t parse_bytes(const std::string& text, const char* option) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string suffix = text.substr(used);
  const std::map<std::string, int> shifts = {{"", 0},     {"K", 10}, {"KiB", 10}, {"M", 20},
                                             {"MiB", 20}, {"G", 30}, {"GiB", 30}};
  auto shift = shifts.find(suffix);
  RT_REQUIRE_INPUT(used > 0 && shift != shifts.end(), "--", option, " ", text,
                   ": expected bytes like 4096, 4K, 256M or 1G");
  return static_cast<size_t>(value) << shift->second;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::vector<comm::allreduce::Algorithm> parse_algorithms(const std::string& list) {
  std::vector<comm::allreduce::Algorithm> out;
  for (const std::string& item : split(list)) out.push_back(comm::allreduce::parse_algorithm(item));
  RT_REQUIRE_INPUT(
      !out.empty(),
      "--algorithms is empty: name at least one of ring, rhd, auto, mpi, hierarchical");
  return out;
}

// Returns false when --help was asked for (printed on rank 0).
// A comma list of 1 and 0 (an option that compares settings in one run).
std::vector<int> parse_switches(const std::string& text, const char* flag) {
  std::vector<int> values;
  for (const std::string& item : split(text)) {
    RT_REQUIRE_INPUT(item == "0" || item == "1", flag, " ", item, ": expected 1 or 0");
    values.push_back(item == "1");
  }
  return values;
}

bool parse_options(int argc, char** argv, BenchOptions& options) {
  std::string min_bytes = "4K", max_bytes = "256M", algorithms = "ring,rhd,auto,mpi,hierarchical";
  std::string wire = "fp32", chunk = "auto", depth = "4", post_all = "1", shm = "1",
              doubling = "default";
  po::options_description desc("rt-allreduce-bench options");
  desc.add_options()("help,h", "print this help and exit")(
      "min-bytes", po::value(&min_bytes)->default_value(min_bytes),
      "smallest message (bytes, K, M, G)")("max-bytes",
                                           po::value(&max_bytes)->default_value(max_bytes),
                                           "largest message; sizes double")(
      "iters", po::value(&options.iters)->default_value(options.iters),
      "timed iterations per size (fewer above 40 MiB: each size moves at most 2 GiB)")(
      "warmup", po::value(&options.warmup)->default_value(options.warmup),
      "untimed iterations first")("algorithms", po::value(&algorithms)->default_value(algorithms),
                                  "comma list of ring, rhd, auto, mpi, hierarchical")(
      "wire", po::value(&wire)->default_value(wire), "ring wire format: fp32, bf16 or fp16")(
      "chunk-bytes", po::value(&chunk)->default_value(chunk),
      "ring/rhd message size (fp32 bytes; auto = 256K from 16 MiB up, else 1M); a comma list "
      "compares several in one run")(
      "in-flight", po::value(&depth)->default_value(depth),
      "ring messages posted ahead per direction; a comma list compares several")(
      "ranks-per-node", po::value(&options.allreduce.ranks_per_node)->default_value(0),
      "hierarchical: N consecutive ranks form a node (0 = real nodes)")(
      "busy-threshold", po::value(&options.busy_threshold)->default_value(options.busy_threshold),
      "mark rows where other processes took more than this fraction of the machine's CPU")(
      "output-dir", po::value(&options.output_dir)->default_value(options.output_dir),
      "where allreduce-np<N>.h5 and .jsonl go");
  desc.add_options()("post-all-ready", po::value(&post_all)->default_value(post_all),
                     "fp32 ring: 1 posts every ready send at once, 0 keeps --in-flight; a "
                     "comma list compares")(
      "shared-memory", po::value(&shm)->default_value(shm),
      "ring on one node: 1 sends through shared memory (ring/shm), 0 through MPI; \"1,0\" "
      "compares")("fastest",
                  "report the fastest iteration, not the median (tuning on a loaded machine)")(
      "doubling-max-bytes", po::value(&doubling)->default_value(doubling),
      "rhd/auto: largest message sent by whole-vector doubling (bytes, K, M; 0 = never)")(
      "shared-buckets", po::value(&options.shared_buckets)->default_value(true),
      "one node: the buffer every contender reduces lives in auto's shared buckets, as the "
      "trainer's fusion buckets do, so auto reduces it in place (0: plain memory)");
  po::variables_map vm;
  if (!bench::parse_command_line(argc, argv, desc, vm, "mpirun -np N rt-allreduce-bench [options]",
                                 nullptr, log::is_root()))
    return false;
  options.fastest = vm.count("fastest") > 0;
  options.min_bytes = parse_bytes(min_bytes, "min-bytes");
  options.max_bytes = parse_bytes(max_bytes, "max-bytes");
  RT_REQUIRE_INPUT(options.min_bytes >= 4 && options.min_bytes <= options.max_bytes, "--min-bytes ",
                   min_bytes, " must be at least 4 and at most --max-bytes ", max_bytes);
  RT_REQUIRE_INPUT(options.max_bytes <= (size_t(1) << 31) - 4096, "--max-bytes ", max_bytes,
                   " is beyond what one MPI message of the link probe carries (2 GiB)");
  RT_REQUIRE_INPUT(options.iters >= 1 && options.warmup >= 0,
                   "--iters must be >= 1 and --warmup >= 0");
  options.algorithms = parse_algorithms(algorithms);
  options.allreduce.wire = comm::allreduce::parse_wire(wire);
  if (doubling != "default")
    options.allreduce.doubling_max_bytes =
        doubling == "0" ? 0 : parse_bytes(doubling, "doubling-max-bytes");
  for (const std::string& item : split(chunk))
    options.chunk_sizes.push_back(item == "auto" ? 0 : parse_bytes(item, "chunk-bytes"));
  for (const std::string& item : split(depth)) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    RT_REQUIRE_INPUT(used == item.size() && value >= 1, "--in-flight ", item,
                     ": expected a count >= 1");
    options.depths.push_back(value);
  }
  options.post_all = parse_switches(post_all, "--post-all-ready");
  options.shm = parse_switches(shm, "--shared-memory");
  RT_REQUIRE_INPUT(!options.chunk_sizes.empty() && !options.depths.empty() &&
                       !options.post_all.empty() && !options.shm.empty(),
                   "--chunk-bytes, --in-flight, --post-all-ready and --shared-memory need at "
                   "least one value");
  options.allreduce.chunk_bytes = options.chunk_sizes[0];
  options.allreduce.chunks_in_flight = options.depths[0];
  options.allreduce.post_all_ready = options.post_all[0];
  options.allreduce.shared_memory = options.shm[0];
  return true;
}

// ---- CPU taken by other processes --------------------------------------------------------

// The largest fraction of any node's CPU time that went to processes other than our ranks
// (bench/bench.hpp measures one process; a node's ranks add up their own CPU time here).
class CpuMeter {
 public:
  explicit CpuMeter(const comm::Communicator& comm) : comm_(comm) {}
  double other_fraction() const {
    std::vector<double> own_per_node(comm_.node_count(), 0.0);
    own_per_node[comm_.node_index()] = others_.own_seconds();
    comm_.allreduce_sum(own_per_node.data(), own_per_node.size());
    const double mine =
        comm_.local_rank() == 0 ? others_.fraction(own_per_node[comm_.node_index()]) : 0;
    const std::vector<double> all = comm_.gather_to_root({mine});
    return all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  }

 private:
  const comm::Communicator& comm_;
  bench::OtherCpu others_;
};

// ---- timed loops ------------------------------------------------------------------------

// One allreducer under test, labelled "ring" or, when several settings are compared,
// "ring 256K/x4".
struct Contender {
  std::string label;
  std::unique_ptr<comm::allreduce::Allreducer> reducer;
};

struct Row {
  std::string algorithm;
  size_t bytes = 0, count = 0;
  int iterations = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0, other_cpu = 0;
  long long wrong = 0;
  bool busy = false;
};

// Root: the median over iterations of the slowest rank's time; others: 0.
double median_of_slowest(const comm::Communicator& comm, const std::vector<double>& mine,
                         bool fastest) {
  const std::vector<double> all = comm.gather_to_root(mine);
  if (all.empty()) return 0;
  std::vector<double> slowest(mine.size(), 0.0);
  for (int r = 0; r < comm.size(); ++r)
    for (size_t i = 0; i < mine.size(); ++i)
      slowest[i] = std::max(slowest[i], all[r * mine.size() + i]);
  return fastest ? *std::min_element(slowest.begin(), slowest.end()) : median(slowest);
}

int iterations_for(size_t bytes, int iters) {
  return std::max(std::min(iters, kMinIters), std::min(iters, int(kBytesPerSize / double(bytes))));
}

// The test data: small integers depending on rank and index, so every sum is exact in fp32
// (and in bf16/fp16 partial sums), and a misplaced segment shows as #wrong.
float bench_value(int rank, size_t i, int amplitude) {
  return float(int64_t((i * 7919 + size_t(rank) * 104729 + 17) % (2 * amplitude + 1)) - amplitude);
}

struct TestData {
  TestData(int rank, int world, size_t count, comm::allreduce::Wire wire)
      : pristine(count), expected(count) {
    // Partial sums of up to `world` values must stay exact in the narrow wire's 8/11 bits.
    const int limit = wire == comm::allreduce::Wire::bf16   ? 256
                      : wire == comm::allreduce::Wire::fp16 ? 2048
                                                            : 1 << 20;
    const int amplitude = std::max(1, std::min(30, limit / std::max(1, world)));
    for (size_t i = 0; i < count; ++i) {
      pristine[i] = bench_value(rank, i, amplitude);
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += bench_value(r, i, amplitude);
      expected[i] = float(sum);
    }
  }
  std::vector<float> pristine, expected;
};

// One row per contender at one size. The contenders take turns inside every iteration
// (link probe, then each algorithm), so they share whatever load the machine has.
std::vector<Row> measure_size(const comm::Communicator& comm, comm::RingLinkProbe& probe,
                              std::vector<Contender>& reducers, const TestData& test, float* data,
                              size_t count, const BenchOptions& options) {
  const size_t bytes = count * sizeof(float);
  const size_t contenders = reducers.size() + 1;  // [0] is the link probe
  const int iterations = iterations_for(bytes, options.iters);
  const int warmup = std::min(options.warmup, iterations);
  std::vector<std::vector<double>> seconds(contenders);
  std::vector<double> wrong(contenders, 0.0);
  CpuMeter meter(comm);
  for (int it = 0; it < warmup + iterations; ++it) {
    for (size_t k = 0; k < contenders; ++k) {
      if (k > 0) std::memcpy(data, test.pristine.data(), bytes);
      comm.barrier();
      const double start = now_seconds();
      if (k == 0)
        probe.exchange(test.pristine.data(), data, bytes);
      else
        reducers[k - 1].reducer->sum(data, count);
      const double took = now_seconds() - start;
      if (it < warmup) continue;
      seconds[k].push_back(took);
      if (k == 0) continue;
      double bad = 0;
      for (size_t i = 0; i < count; ++i) bad += data[i] != test.expected[i];
      wrong[k] = std::max(wrong[k], bad);
    }
  }
  comm.allreduce_sum(wrong.data(), wrong.size());
  const double other_cpu = meter.other_fraction();
  const int n = comm.size();
  std::vector<Row> rows(contenders);
  for (size_t k = 0; k < contenders; ++k) {
    Row& row = rows[k];
    row.algorithm = k == 0 ? "p2p" : reducers[k - 1].label;
    row.bytes = bytes;
    row.count = count;
    row.iterations = iterations;
    row.wrong = static_cast<long long>(wrong[k]);
    row.other_cpu = other_cpu;
    row.busy = other_cpu > options.busy_threshold;
    const double t = median_of_slowest(comm, seconds[k], options.fastest);
    row.time_us = t * 1e6;
    if (t <= 0) continue;
    row.algbw_gbps = double(bytes) / t / 1e9;
    // The link probe moves its bytes once each way: its "busbw" is its bandwidth.
    row.busbw_gbps = row.algbw_gbps * (k == 0 || n == 1 ? 1.0 : 2.0 * (n - 1) / n);
  }
  return rows;
}

// ---- output -------------------------------------------------------------------------------

std::string size_text(size_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return str(bytes >> 20, " MiB");
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return str(bytes >> 10, " KiB");
  return str(bytes, " B");
}

std::string chunk_text(size_t chunk_bytes) {
  return chunk_bytes ? size_text(chunk_bytes) : "auto (256 KiB from 16 MiB up, else 1 MiB)";
}

std::string format(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), fmt, value);
  return text;
}

void print_header(const comm::Communicator& comm, const BenchOptions& options,
                  const std::vector<std::string>& names, const std::vector<std::string>& hosts) {
  std::string mca;
  for (const char* knob :
       {"btl_vader_single_copy_mechanism", "btl_vader_eager_limit", "btl_vader_max_send_size",
        "mpi_yield_when_idle", "hwloc_base_binding_policy", "coll_tuned_use_dynamic_rules",
        "coll_tuned_allreduce_algorithm"})
    if (const char* value = std::getenv(str("OMPI_MCA_", knob).c_str()))
      mca += str(" ", knob, "=", value);
  std::printf(
      "# rt-allreduce-bench: %d ranks on %d node(s) (%s), wire %s, chunk %s x %d in flight\n",
      comm.size(), comm.node_count(), hosts.empty() ? "?" : hosts[0].c_str(),
      comm::allreduce::to_string(options.allreduce.wire).c_str(),
      chunk_text(options.allreduce.chunk_bytes).c_str(), options.allreduce.chunks_in_flight);
  std::printf("# buffer: %s\n",
              options.shared_buckets && comm.node_count() == 1
                  ? "auto's shared buckets where it has them (one node, fp32): auto reduces in "
                    "place, the others on the same memory"
                  : "plain memory");
  std::printf("# hierarchical nodes: %s; rank 0 affinity %d CPU(s); MCA:%s\n",
              options.allreduce.ranks_per_node > 0
                  ? str(options.allreduce.ranks_per_node, " consecutive ranks").c_str()
                  : "real nodes",
              comm::own_affinity_cpus(), mca.empty() ? " (defaults)" : mca.c_str());
  std::printf(
      "# time: %s over iterations of the slowest rank (us); bw in GB/s (1e9 B/s); "
      "busbw = algbw*2(n-1)/n; p2p = one ring link, both directions at once\n",
      options.fastest ? "FASTEST (--fastest)" : "median");
  std::printf(
      "# other%%: CPU taken by other processes during the row (/proc/stat); '!' = busy "
      "(> %.0f%%)\n#\n",
      options.busy_threshold * 100);
  std::printf("# %9s %10s %5s", "size", "count", "iters");
  for (const auto& name : names)
    std::printf(" | %-12s %9s %6s %6s %6s", name.c_str(), "time", "algbw", "busbw", "#wrong");
  std::printf(" | %6s | %8s %8s | %6s\n", "p2p", "ours/mpi", "ours/p2p", "other%");
}

// "ours" in the ratio columns: auto when it runs (what a user gets by default, measured as
// one contender, not the best of several noisy ones picked afterwards), else the first of rhd
// and ring in --algorithms order.
bool is_ours(const std::string& label) {
  return label.rfind("ring", 0) == 0 || label.rfind("rhd", 0) == 0;
}

// rows[0] is the link probe, the rest the algorithms in --algorithms order.
void print_row(const std::vector<Row>& rows) {
  const Row& link = rows[0];
  std::printf("  %9s %10zu %5d", size_text(link.bytes).c_str(), link.count, link.iterations);
  const Row *ours = nullptr, *mpi = nullptr;
  for (size_t k = 1; k < rows.size(); ++k) {
    const Row& row = rows[k];
    std::printf(" | %-12s %9.1f %6.2f %6.2f %6lld", "", row.time_us, row.algbw_gbps, row.busbw_gbps,
                row.wrong);
    if (row.algorithm.rfind("auto", 0) == 0 && !(ours && ours->algorithm.rfind("auto", 0) == 0))
      ours = &row;
    if (!ours && is_ours(row.algorithm)) ours = &row;
    if (row.algorithm == "mpi") mpi = &row;
  }
  auto ratio = [](const Row* a, const Row* b) {
    return a && b && b->busbw_gbps > 0 ? format("%8.2f", a->busbw_gbps / b->busbw_gbps)
                                       : std::string("       -");
  };
  std::printf(" | %6.2f | %s %s | %5.1f%s\n", link.busbw_gbps, ratio(ours, mpi).c_str(),
              ratio(ours, &link).c_str(), link.other_cpu * 100, link.busy ? "!" : " ");
  std::fflush(stdout);
}

std::string json_line(const Row& row, int world, comm::allreduce::Wire wire, double ratio_vs_mpi) {
  return str(
      "{\"algorithm\":\"", row.algorithm, "\",\"np\":", world, ",\"wire\":\"",
      comm::allreduce::to_string(wire), "\",\"bytes\":", row.bytes, ",\"count\":", row.count,
      ",\"iterations\":", row.iterations, ",\"time_us\":", format("%.3f", row.time_us),
      ",\"algbw_gbps\":", format("%.4f", row.algbw_gbps),
      ",\"busbw_gbps\":", format("%.4f", row.busbw_gbps), ",\"wrong\":", row.wrong,
      ",\"ratio_vs_mpi\":", ratio_vs_mpi > 0 ? format("%.4f", ratio_vs_mpi) : std::string("null"),
      ",\"other_cpu\":", format("%.4f", row.other_cpu), ",\"busy\":", row.busy ? "true" : "false",
      "}");
}

void write_outputs(const comm::Communicator& comm, const BenchOptions& options,
                   const std::map<std::string, std::vector<Row>>& by_algorithm,
                   const std::vector<std::string>& hosts) {
  h5::require_writable_dir(options.output_dir, "--output-dir");
  const std::string wire = comm::allreduce::to_string(options.allreduce.wire);
  const std::string stem =
      str(options.output_dir, "/allreduce-np", comm.size(),
          options.allreduce.wire == comm::allreduce::Wire::fp32 ? "" : "-" + wire);
  // JSON lines, written atomically (core/atomic_file.hpp).
  const std::vector<Row>* mpi = by_algorithm.count("mpi") ? &by_algorithm.at("mpi") : nullptr;
  std::string lines;
  for (const auto& [name, rows] : by_algorithm)
    for (size_t i = 0; i < rows.size(); ++i) {
      const double ratio = mpi && (*mpi)[i].busbw_gbps > 0 && name != "p2p"
                               ? rows[i].busbw_gbps / (*mpi)[i].busbw_gbps
                               : 0;
      lines += json_line(rows[i], comm.size(), options.allreduce.wire, ratio) + "\n";
    }
  write_file_atomically(stem + ".jsonl", lines);

  h5::AtomicFile file(stem + ".h5");
  auto& root = file.root();
  root.set_attr("tool", "rt-allreduce-bench");
  root.set_attr("world_size", int32_t(comm.size()));
  root.set_attr("nodes", int32_t(comm.node_count()));
  root.set_attr("hosts", hosts);
  root.set_attr("wire", wire);
  root.set_attr("chunk_bytes", uint64_t(options.allreduce.chunk_bytes));
  root.set_attr("chunks_in_flight", int32_t(options.allreduce.chunks_in_flight));
  root.set_attr("hierarchical_ranks_per_node", int32_t(options.allreduce.ranks_per_node));
  root.set_attr("busy_threshold", options.busy_threshold);
  root.set_attr("time_definition", options.fastest
                                       ? "fastest iteration of the slowest rank"
                                       : "median over iterations of the slowest rank's time");
  root.set_attr("created", str(std::time(nullptr), " (unix seconds)"));
  for (const auto& [name, rows] : by_algorithm) {
    std::string group_name = name;
    std::replace(group_name.begin(), group_name.end(), '/', '_');
    auto group = root.create_group(group_name);
    std::vector<uint64_t> bytes, count;
    std::vector<int32_t> iterations;
    std::vector<double> time_us, algbw, busbw, other;
    std::vector<int64_t> wrong;
    std::vector<uint8_t> busy;
    for (const Row& r : rows) {
      bytes.push_back(r.bytes);
      count.push_back(r.count);
      iterations.push_back(r.iterations);
      time_us.push_back(r.time_us);
      algbw.push_back(r.algbw_gbps);
      busbw.push_back(r.busbw_gbps);
      other.push_back(r.other_cpu);
      wrong.push_back(r.wrong);
      busy.push_back(r.busy);
    }
    group.write("bytes", bytes).set_attr("units", "bytes");
    group.write("count", count).set_attr("units", "fp32 elements");
    group.write("iterations", iterations);
    group.write("time_us", time_us).set_attr("units", "microseconds");
    group.write("algbw_gbps", algbw).set_attr("units", "1e9 bytes/s");
    group.write("busbw_gbps", busbw).set_attr("units", "1e9 bytes/s");
    group.write("wrong", wrong).set_attr("units", "elements differing from the exact sum");
    group.write("other_cpu_fraction", other).set_attr("units", "fraction of the node's CPU time");
    group.write("busy", busy);
  }
  file.commit();
}

// The buffer every contender reduces: on one node, in auto's shared buckets (where the trainer's
// fusion buckets live, so auto reduces it in place and the others see the same memory), else
// plain. Collective: every rank asks the same contenders in the same order.
std::shared_ptr<float> bench_buffer(std::vector<Contender>& reducers, size_t count,
                                    const BenchOptions& options) {
  for (Contender& contender : reducers)
    if (options.shared_buckets && contender.label.rfind("auto", 0) == 0)
      if (std::shared_ptr<float> shared = contender.reducer->shared_buffers(count * sizeof(float)))
        return shared;
  return std::shared_ptr<float>(new float[std::max<size_t>(count, 1)](),
                                std::default_delete<float[]>());
}

int run(int argc, char** argv) {
  comm::Communicator comm;
  BenchOptions options;
  if (!parse_options(argc, argv, options)) return kExitOk;

  std::vector<Contender> reducers;
  std::vector<std::string> names;
  const bool compare =
      options.chunk_sizes.size() * options.depths.size() * options.post_all.size() > 1;
  for (comm::allreduce::Algorithm algorithm : options.algorithms) {
    comm::allreduce::AllreduceOptions o = options.allreduce;
    if (algorithm == comm::allreduce::Algorithm::mpi) {
      o.wire = comm::allreduce::Wire::fp32;
      reducers.push_back({"mpi", comm::allreduce::make_allreducer(comm, algorithm, o)});
      names.push_back("mpi");
      continue;
    }
    for (int shm : options.shm)
      for (size_t chunk : options.chunk_sizes)
        for (int depth : options.depths)
          for (int all : options.post_all) {
            o.shared_memory = shm;
            o.chunk_bytes = chunk;
            o.chunks_in_flight = depth;
            o.post_all_ready = all;
            auto reducer = comm::allreduce::make_allreducer(comm, algorithm, o);
            std::string label = reducer->name();
            if (compare)
              label = str(label, " ", chunk ? str(chunk >> 10, "K") : "auto", "/x", depth,
                          all ? "+" : "");
            // rhd, auto and hierarchical have no shm transport of their own: one row each.
            if (std::find(names.begin(), names.end(), label) != names.end()) continue;
            names.push_back(label);
            reducers.push_back({label, std::move(reducer)});
          }
  }
  comm::RingLinkProbe probe(comm);
  const std::vector<std::string> hosts = comm.gather_strings_to_root(comm.hostname());
  if (comm.rank() == 0) print_header(comm, options, names, hosts);

  const size_t max_count = options.max_bytes / sizeof(float);
  const TestData test(comm.rank(), comm.size(), max_count, options.allreduce.wire);
  const std::shared_ptr<float> data = bench_buffer(reducers, max_count, options);
  std::map<std::string, std::vector<Row>> by_algorithm;
  for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    const std::vector<Row> rows =
        measure_size(comm, probe, reducers, test, data.get(), count, options);
    if (comm.rank() != 0) continue;
    print_row(rows);
    for (const Row& row : rows) by_algorithm[row.algorithm].push_back(row);
  }
  long long wrong = 0;
  for (const auto& [name, rows] : by_algorithm)
    for (const Row& row : rows) wrong += row.wrong;
  bool ok = true;
  if (comm.rank() == 0) {
    try {
      write_outputs(comm, options, by_algorithm, hosts);
      std::printf("# wrote %s/allreduce-np%d.{h5,jsonl}\n", options.output_dir.c_str(),
                  comm.size());
    } catch (const Error& e) {
      log::error(e.what());
      ok = false;
    }
    if (wrong > 0) log::error(str(wrong, " wrong elements in all: an allreduce is broken"));
  }
  if (!comm.all_ok(ok && wrong == 0)) return kExitFailure;
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    if (log::is_root()) std::fprintf(stderr, "rt-allreduce-bench: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    log::error(e.what());
    return kExitFailure;
  }
}
