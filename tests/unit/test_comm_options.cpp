// test_comm_options.cpp — allreduce algorithm and wire parsing, wire conversions and bounds,
// bulk kernels, and the per-rank CPU thread share (no MPI needed).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/auto_allreduce.hpp"
#include "ringtrain/comm/cpu_share.hpp"
#include "ringtrain/comm/shm/wait_style.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;

namespace {
std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(comm_options)

// Before: every allreducer was wrapped in the device stager whenever a GPU was visible (the
// decision took the visible GPU count), so a cpu run on a GPU machine made a CUDA context on
// GPU 0 in every rank (a cudaPointerGetAttributes per bucket), and nccl on the cpu backend
// failed inside NCCL instead of naming the deck keys.
BOOST_AUTO_TEST_CASE(only_the_cuda_backends_memory_is_staged_or_handed_to_nccl) {
  using comm::allreduce::Algorithm;
  using comm::allreduce::device_memory_path;
  using comm::allreduce::DevicePath;
  for (Algorithm a : {Algorithm::ring, Algorithm::rhd, Algorithm::automatic, Algorithm::mpi,
                      Algorithm::hierarchical}) {
    BOOST_TEST((device_memory_path(a, -1, true) == DevicePath::host));
    BOOST_TEST((device_memory_path(a, -1, false) == DevicePath::host));
    const bool aware_mpi = a == Algorithm::mpi;
    BOOST_TEST((device_memory_path(a, 2, true) ==
                (aware_mpi ? DevicePath::cuda_aware_mpi : DevicePath::staged)));
    BOOST_TEST((device_memory_path(a, 0, false) == DevicePath::staged));
  }
  BOOST_TEST((device_memory_path(Algorithm::nccl, 1, false) == DevicePath::nccl));
  BOOST_TEST(input_error([&] { device_memory_path(Algorithm::nccl, -1, false); }) ==
             "comm.algorithm = nccl reduces GPU memory, but the gradients of this run are in "
             "host memory: set train.backend = cuda (or comm.algorithm = ring, rhd, auto, mpi "
             "or hierarchical for the cpu backend)");
}

BOOST_AUTO_TEST_CASE(algorithms_and_wires_parse_or_name_the_choices) {
  BOOST_TEST((comm::allreduce::parse_algorithm("ring") == comm::allreduce::Algorithm::ring));
  BOOST_TEST((comm::allreduce::parse_algorithm("mpi") == comm::allreduce::Algorithm::mpi));
  BOOST_TEST((comm::allreduce::parse_algorithm("hierarchical") ==
              comm::allreduce::Algorithm::hierarchical));
  BOOST_TEST((comm::allreduce::parse_algorithm("nccl") == comm::allreduce::Algorithm::nccl));
  BOOST_TEST((comm::allreduce::parse_algorithm("rhd") == comm::allreduce::Algorithm::rhd));
  BOOST_TEST((comm::allreduce::parse_algorithm("auto") == comm::allreduce::Algorithm::automatic));
  for (auto a : {comm::allreduce::Algorithm::ring, comm::allreduce::Algorithm::rhd,
                 comm::allreduce::Algorithm::automatic, comm::allreduce::Algorithm::mpi,
                 comm::allreduce::Algorithm::hierarchical, comm::allreduce::Algorithm::nccl})
    BOOST_TEST((comm::allreduce::parse_algorithm(comm::allreduce::to_string(a)) == a));
  BOOST_TEST(input_error([] { comm::allreduce::parse_algorithm("Ring"); }) ==
             "unknown allreduce algorithm 'Ring': choose ring, rhd, auto, mpi, hierarchical or "
             "nccl");
  BOOST_TEST((comm::allreduce::parse_wire("bf16") == comm::allreduce::Wire::bf16));
  BOOST_TEST(comm::allreduce::to_string(comm::allreduce::parse_wire("fp16")) == "fp16");
  BOOST_TEST(input_error([] { comm::allreduce::parse_wire("fp8"); }) ==
             "unknown allreduce wire format 'fp8': choose fp32, bf16 or fp16");
}

BOOST_AUTO_TEST_CASE(wire_conversions_round_to_nearest_even) {
  BOOST_TEST(comm::allreduce::bf16_to_float(comm::allreduce::float_to_bf16(1.0f)) == 1.0f);
  BOOST_TEST(comm::allreduce::bf16_to_float(comm::allreduce::float_to_bf16(256.0f)) == 256.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  BOOST_TEST(comm::allreduce::bf16_to_float(
                 comm::allreduce::float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  BOOST_TEST(comm::allreduce::bf16_to_float(comm::allreduce::float_to_bf16(
                 1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  BOOST_TEST(
      std::isnan(comm::allreduce::bf16_to_float(comm::allreduce::float_to_bf16(std::nanf("")))));
  BOOST_TEST(comm::allreduce::fp16_to_float(comm::allreduce::float_to_fp16(2048.0f)) == 2048.0f);
  BOOST_TEST(comm::allreduce::fp16_to_float(
                 comm::allreduce::float_to_fp16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  BOOST_TEST(std::isinf(comm::allreduce::fp16_to_float(comm::allreduce::float_to_fp16(70000.0f))));
  // Every bf16 and fp16 value survives the trip to fp32 and back: forwarding is exact.
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float b = comm::allreduce::bf16_to_float(h), f = comm::allreduce::fp16_to_float(h);
    if (!std::isnan(b)) BOOST_REQUIRE(comm::allreduce::float_to_bf16(b) == h);
    if (!std::isnan(f)) BOOST_REQUIRE(comm::allreduce::float_to_fp16(f) == h);
  }
}

BOOST_AUTO_TEST_CASE(bulk_wire_kernels_match_the_scalar_conversions) {
  // Every 16-bit pattern through decode and decode-add, and floats of every scale (normal,
  // subnormal, overflowing, ties) through encode, at a length with a vector tail.
  std::vector<uint16_t> halves(65536 + 5);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> floats(halves.size());
  for (size_t i = 0; i < floats.size(); ++i)
    floats[i] = std::ldexp(1.0f + float(i % 977) / 512.0f, int(i % 61) - 40) * (i % 2 ? -1 : 1);
  for (comm::allreduce::Wire wire : {comm::allreduce::Wire::bf16, comm::allreduce::Wire::fp16}) {
    auto to_float = wire == comm::allreduce::Wire::bf16 ? comm::allreduce::bf16_to_float
                                                        : comm::allreduce::fp16_to_float;
    auto to_half = wire == comm::allreduce::Wire::bf16 ? comm::allreduce::float_to_bf16
                                                       : comm::allreduce::float_to_fp16;
    std::vector<float> decoded(halves.size()), sums(halves.size(), 0.5f);
    comm::allreduce::decode_wire(wire, decoded.data(), halves.data(), halves.size());
    comm::allreduce::decode_add_wire(wire, sums.data(), halves.data(), halves.size());
    std::vector<uint16_t> encoded(floats.size());
    comm::allreduce::encode_wire(wire, encoded.data(), floats.data(), floats.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < halves.size(); ++i) {
      const float expect = to_float(halves[i]);
      const float expect_sum = 0.5f + expect;
      if (!std::isnan(expect) && std::memcmp(&decoded[i], &expect, 4) != 0) ++mismatches;
      if (!std::isnan(expect) && std::memcmp(&sums[i], &expect_sum, 4) != 0) ++mismatches;
      if (encoded[i] != to_half(floats[i])) ++mismatches;
    }
    BOOST_TEST(mismatches == 0u, comm::allreduce::to_string(wire)
                                     << ": bulk and scalar kernels differ");
  }
}

BOOST_AUTO_TEST_CASE(wire_error_bound_grows_with_ranks) {
  BOOST_TEST(comm::allreduce::wire_error_bound(comm::allreduce::Wire::fp32, 4, 1.0) ==
             4 * std::ldexp(1.0, -24));
  const double bf16_two = comm::allreduce::wire_error_bound(comm::allreduce::Wire::bf16, 2, 1.0);
  BOOST_TEST(bf16_two > 2 * std::ldexp(1.0, -8));
  BOOST_TEST(comm::allreduce::wire_error_bound(comm::allreduce::Wire::bf16, 4, 1.0) > bf16_two);
}

BOOST_AUTO_TEST_CASE(cpu_share_divides_usable_cores_among_local_ranks) {
  comm::CpuFacts facts;
  facts.own_affinity_cpus = 2;
  facts.node_affinity_cpus = 2;
  facts.local_ranks = 1;
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 2);
  facts.local_ranks = 4;  // oversubscribed: at least one thread each
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 1);
  facts = {};
  facts.own_affinity_cpus = 1;  // bound to one core each (OpenMPI's default for np <= 2)
  facts.node_affinity_cpus = 8;
  facts.local_ranks = 2;
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 1);
  facts.own_affinity_cpus = 16;
  facts.node_affinity_cpus = 16;
  facts.cgroup_cpus = 6.5;  // the container's quota caps the node's cores
  comm::CpuShare share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 3);
  BOOST_TEST(share.description ==
             "3 threads per rank: 6 usable cores (node affinity 16, cgroup limit 6.5 CPUs) / 2 "
             "ranks on this node; this rank's mask holds 16");
  BOOST_TEST(share.warning.empty());
}

// srun --cpus-per-task=2 on a 16-core node with --cpu-bind=none (or task/none): the mask is the
// node's, the allocation is 2 CPUs a task.
BOOST_AUTO_TEST_CASE(slurm_cpus_caps_an_unbound_share) {
  comm::CpuFacts facts;
  facts.own_affinity_cpus = 16;
  facts.node_affinity_cpus = 16;
  facts.local_ranks = 2;
  facts.slurm_cpus = "2";
  comm::CpuShare share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 2);
  BOOST_TEST(share.description ==
             "2 threads per rank: SLURM_CPUS_PER_TASK=2 (16 usable cores / 2 ranks on this node "
             "would give more; this rank's mask holds 16)");
  facts.own_affinity_cpus = 1;  // bound by Slurm: the mask is already the allocation
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 1);
  facts.own_affinity_cpus = 16;
  facts.slurm_cpus = "oops";  // not a count: the share alone
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 8);
  facts.slurm_cpus = "4";
  facts.omp_num_threads = "3";  // OMP_NUM_THREADS still wins
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 3);
}

// A fractional cgroup limit is one count of the node's CPUs for both the thread share and the
// shared-memory waits: rounded down, so 2 ranks in 1.5 CPUs get 1 thread each and yield (they
// used to spin: the waits rounded 1.5 up to 2), and 3 ranks in 2.5 CPUs likewise.
BOOST_AUTO_TEST_CASE(fractional_cgroup_limits_count_alike_for_threads_and_waits) {
  using comm::shm::WaitStyle;
  struct Case {
    double cgroup;
    int ranks, usable, threads;
    WaitStyle wait;
  };
  for (const Case& c : {Case{1.5, 1, 1, 1, WaitStyle::spin}, Case{1.5, 2, 1, 1, WaitStyle::yield},
                        Case{2.5, 2, 2, 1, WaitStyle::spin}, Case{2.5, 3, 2, 1, WaitStyle::yield},
                        Case{2.5, 1, 2, 2, WaitStyle::spin}}) {
    BOOST_TEST_CONTEXT(c.ranks << " ranks in " << c.cgroup << " CPUs") {
      comm::CpuFacts facts;
      facts.own_affinity_cpus = facts.node_affinity_cpus = 8;
      facts.cgroup_cpus = c.cgroup;
      facts.local_ranks = c.ranks;
      BOOST_TEST(comm::usable_node_cpus(facts) == c.usable);
      BOOST_TEST(comm::compute_cpu_share(facts).threads == c.threads);
      BOOST_TEST(comm::shm::to_string(comm::shm::wait_style_for(facts, nullptr)) ==
                 comm::shm::to_string(c.wait));
    }
  }
}

BOOST_AUTO_TEST_CASE(omp_num_threads_wins_and_warns_when_it_oversubscribes) {
  comm::CpuFacts facts;
  facts.own_affinity_cpus = 1;
  facts.node_affinity_cpus = 2;
  facts.local_ranks = 2;
  facts.omp_num_threads = "4,2";
  comm::CpuShare share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 4);
  BOOST_TEST(share.warning ==
             "OMP_NUM_THREADS=4,2 asks for more threads than the 1 CPU(s) in this rank's affinity "
             "mask; threads will share cores. HINT: mpirun --map-by slot:PE=4 (or srun "
             "--cpus-per-task=4), or unset OMP_NUM_THREADS");
  facts.omp_num_threads = "many";
  share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 1);
  BOOST_TEST(share.warning == "OMP_NUM_THREADS=many is not a positive thread count; ignored");
}

// OpenMP starts at most OMP_THREAD_LIMIT threads in a region, and the backends refuse a count
// above it (oneDNN would wait for the missing threads forever): the automatic share, and
// OMP_NUM_THREADS, are capped to it rather than refused.
BOOST_AUTO_TEST_CASE(omp_thread_limit_caps_the_share) {
  comm::CpuFacts facts;
  facts.own_affinity_cpus = facts.node_affinity_cpus = 2;
  facts.omp_thread_limit = 1;
  comm::CpuShare share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 1);
  BOOST_TEST(share.description ==
             "1 thread per rank: OMP_THREAD_LIMIT=1 (without it: 2 threads per rank: 2 usable "
             "cores (node affinity 2, cgroup limit none) / 1 rank on this node; this rank's mask "
             "holds 2)");
  BOOST_TEST(share.warning.empty());
  facts.omp_thread_limit = 2;  // at the share: nothing to cap
  BOOST_TEST(comm::compute_cpu_share(facts).description.rfind("2 threads per rank: 2 usable", 0) ==
             0);
  facts.omp_thread_limit = 0;  // unset, or not a count OpenMP took: no cap
  BOOST_TEST(comm::compute_cpu_share(facts).threads == 2);
  facts.omp_thread_limit = 3;
  facts.omp_num_threads = "4";
  share = comm::compute_cpu_share(facts);
  BOOST_TEST(share.threads == 3);
  BOOST_TEST(share.warning ==
             "OMP_NUM_THREADS=4 asks for more threads than OMP_THREAD_LIMIT=3 lets OpenMP start; "
             "running 3");
}

// 0 picks by message size (the table in docs/TUNING.md); anything else is taken as given.
BOOST_AUTO_TEST_CASE(chunk_size_by_message_size_unless_configured) {
  BOOST_TEST(comm::allreduce::chunk_bytes_for(0, (16u << 20) - 4) == (1u << 20));
  BOOST_TEST(comm::allreduce::chunk_bytes_for(0, 16u << 20) == (256u << 10));
  BOOST_TEST(comm::allreduce::chunk_bytes_for(0, 4) == (1u << 20));
  BOOST_TEST(comm::allreduce::chunk_bytes_for(64, 256u << 20) == 64u);
}

// The thresholds of choose_automatic (measured: docs/TUNING.md), at their edges.
BOOST_AUTO_TEST_CASE(auto_picks_by_size_and_world_at_the_measured_thresholds) {
  using comm::allreduce::Algorithm;
  using comm::allreduce::choose_automatic;
  BOOST_TEST((choose_automatic(32u << 10, 2) == Algorithm::rhd));
  BOOST_TEST((choose_automatic((32u << 10) + 4, 2) == Algorithm::ring));
  BOOST_TEST((choose_automatic(16u << 20, 4) == Algorithm::rhd));
  BOOST_TEST((choose_automatic((16u << 20) + 4, 4) == Algorithm::ring));
  BOOST_TEST((choose_automatic(16u << 20, 8) == Algorithm::rhd));
  BOOST_TEST((choose_automatic(64u << 10, 3) == Algorithm::rhd));
  BOOST_TEST((choose_automatic((64u << 10) + 4, 5) == Algorithm::ring));
}

// Across nodes of several ranks: rhd at every size on a power of two (its first, largest steps
// stay in a node), else hierarchical past 64 KiB; with one rank a node the nodes are the ranks
// and the one-node rule applies.
BOOST_AUTO_TEST_CASE(auto_across_nodes_of_several_ranks) {
  using comm::allreduce::Algorithm;
  using comm::allreduce::choose_automatic;
  using comm::allreduce::Topology;
  const Topology two_by_two{4, 2, 2}, two_by_one{2, 2, 1}, uneven{3, 2, 2}, three_by_two{6, 3, 2};
  BOOST_TEST((choose_automatic(64u << 10, two_by_two) == Algorithm::rhd));
  BOOST_TEST((choose_automatic((64u << 10) + 4, two_by_two) == Algorithm::rhd));
  BOOST_TEST((choose_automatic(1u << 30, two_by_two) == Algorithm::rhd));
  BOOST_TEST((choose_automatic(64u << 10, uneven) == Algorithm::rhd));
  BOOST_TEST((choose_automatic((64u << 10) + 4, uneven) == Algorithm::hierarchical));
  BOOST_TEST((choose_automatic(64u << 20, three_by_two) == Algorithm::hierarchical));
  BOOST_TEST((choose_automatic(32u << 10, two_by_one) == Algorithm::rhd));
  BOOST_TEST((choose_automatic(1u << 20, two_by_one) == Algorithm::ring));
  BOOST_TEST((choose_automatic(1u << 20, Topology{4, 1, 4}) == Algorithm::rhd));
  BOOST_TEST((choose_automatic(32u << 20, Topology{4, 1, 4}) == Algorithm::ring));
}

// Shared-memory waits yield only where the node's ranks outnumber its CPUs (4 ranks on 2 vCPUs
// lost to MPI_Allreduce at 64 KiB spinning then sleeping); RINGTRAIN_SHM_WAIT overrides.
BOOST_AUTO_TEST_CASE(shm_waits_yield_where_ranks_outnumber_cpus) {
  using comm::shm::wait_style_for;
  using comm::shm::WaitStyle;
  BOOST_TEST((wait_style_for(2, 2, nullptr) == WaitStyle::spin));
  BOOST_TEST((wait_style_for(3, 2, nullptr) == WaitStyle::yield));
  BOOST_TEST((wait_style_for(4, 2, "") == WaitStyle::yield));
  BOOST_TEST((wait_style_for(4, 2, "auto") == WaitStyle::yield));
  BOOST_TEST((wait_style_for(1, 1, nullptr) == WaitStyle::spin));
  BOOST_TEST((wait_style_for(4, 2, "spin") == WaitStyle::spin));
  BOOST_TEST((wait_style_for(2, 16, "yield") == WaitStyle::yield));
  BOOST_TEST((wait_style_for(4, 2, "sleep") == WaitStyle::sleep));
  BOOST_TEST(input_error([] { wait_style_for(2, 2, "Yield"); }).find("RINGTRAIN_SHM_WAIT=Yield") !=
             std::string::npos);
  BOOST_TEST(comm::shm::to_string(WaitStyle::yield) == "yield");
  BOOST_TEST(comm::shm::to_string(WaitStyle::sleep) == "sleep");
}

BOOST_AUTO_TEST_SUITE_END()
