// test_shm_wait_style.cpp — how the node's shared-memory waits pass the time (spin, yield, sleep):
// every rank agrees, the rule follows ranks and CPUs, RINGTRAIN_SHM_WAIT forces each style, a
// bad value fails on every rank, and under each style the sums are exact and bitwise equal.
// np: 1 2 3 4 5
// nodes: 2x2
// quick: 2
#define BOOST_TEST_MODULE shm_wait_style
#define OMPI_SKIP_MPICXX 1
#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "allreduce_test_data.hpp"
#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/cpu_share.hpp"
#include "ringtrain/comm/shm/shared_buckets.hpp"
#include "ringtrain/comm/shm/shm_ring.hpp"
#include "ringtrain/core/error.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::shm::WaitStyle;

namespace {

// RINGTRAIN_SHM_WAIT set for one scope on every rank, then unset again.
struct WaitSetting {
  explicit WaitSetting(const char* value) { setenv("RINGTRAIN_SHM_WAIT", value, 1); }
  ~WaitSetting() { unsetenv("RINGTRAIN_SHM_WAIT"); }
  WaitSetting(const WaitSetting&) = delete;
  WaitSetting& operator=(const WaitSetting&) = delete;
};

bool same_on_every_rank(int value) {
  int low = value, high = value;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

std::vector<float> slice(const float* data, size_t count) {
  return std::vector<float>(data, data + count);
}

constexpr size_t kRegionFloats = (size_t(1) << 18) + 4096;

}  // namespace

BOOST_AUTO_TEST_SUITE(shm_wait_style)

// Without a setting: yield exactly where the node's ranks outnumber the CPUs their masks (and
// the cgroup) allow, the same answer on every rank. Worked out here from the masks themselves.
BOOST_AUTO_TEST_CASE(the_rule_follows_ranks_and_cpus_and_every_rank_agrees) {
  unsetenv("RINGTRAIN_SHM_WAIT");
  std::string why_not;
  auto buckets = comm::shm::SharedBuckets::try_make(MPI_COMM_WORLD, 4096, why_not);
  const rt_test::Topology nodes = rt_test::topology();
  BOOST_TEST(rt_test::all_ok((buckets != nullptr) == (nodes.nodes == 1)), why_not);
  if (!buckets) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  sched_getaffinity(0, sizeof mask, &mask);
  std::vector<cpu_set_t> masks(size_t(rt_test::world_size()));
  MPI_Allgather(&mask, sizeof mask, MPI_BYTE, masks.data(), sizeof mask, MPI_BYTE, MPI_COMM_WORLD);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (cpu_set_t& m : masks) CPU_OR(&all, &all, &m);
  // The cgroup limit rounded down, as for the thread share: 1.5 CPUs are one CPU to count on.
  int cpus = CPU_COUNT(&all);
  if (comm::cgroup_cpu_limit() > 0)
    cpus = std::min(cpus, std::max(1, int(std::floor(comm::cgroup_cpu_limit()))));
  const WaitStyle expected = rt_test::world_size() > cpus ? WaitStyle::yield : WaitStyle::spin;
  BOOST_TEST(rt_test::all_ok(buckets->wait_style() == expected),
             rt_test::world_size() << " ranks, " << cpus << " CPUs: got "
                                   << comm::shm::to_string(buckets->wait_style()));
  BOOST_TEST(same_on_every_rank(int(buckets->wait_style())));
}

BOOST_AUTO_TEST_CASE(the_setting_forces_each_style_on_buckets_and_ring) {
  for (const char* value : {"spin", "yield", "sleep", "auto"}) {
    WaitSetting setting(value);
    std::string why_not;
    auto buckets = comm::shm::SharedBuckets::try_make(MPI_COMM_WORLD, 4096, why_not);
    auto ring = comm::shm::ShmRing::try_make(
        MPI_COMM_WORLD, (rt_test::world_rank() + 1) % rt_test::world_size(), 2, 4096, why_not);
    if (!buckets || !ring) continue;  // across nodes: neither exists
    if (std::string(value) == "auto") {
      BOOST_TEST(same_on_every_rank(int(buckets->wait_style())));
      BOOST_TEST((buckets->wait_style() == ring->wait_style()));
    } else {
      BOOST_TEST(comm::shm::to_string(buckets->wait_style()) == value);
      BOOST_TEST(comm::shm::to_string(ring->wait_style()) == value);
    }
  }
}

// Rank 0's value counts for all, so a bad one is an input error on every rank (none waits in
// a collective for a rank that threw).
BOOST_AUTO_TEST_CASE(a_bad_setting_is_an_input_error_on_every_rank) {
  WaitSetting setting("sleepy");
  std::string why_not, message;
  try {
    comm::shm::SharedBuckets::try_make(MPI_COMM_WORLD, 4096, why_not);
  } catch (const InputError& e) {
    message = e.what();
  }
  const bool one_node = rt_test::topology().nodes == 1;
  BOOST_TEST(
      rt_test::all_ok(!one_node || message.find("RINGTRAIN_SHM_WAIT=sleepy") != std::string::npos),
      message);
}

// Under each style, the trainer's two shared-memory paths: the buckets reduced in place and
// the ring through ShmRing (calls up to 512 KiB; one float more goes through MPI). Exact sums,
// the same bytes on every rank, and a bucket rewritten the moment each call returns.
BOOST_AUTO_TEST_CASE(sums_are_exact_and_identical_under_each_style) {
  const int p = rt_test::world_size(), rank = rt_test::world_rank();
  for (const char* value : {"spin", "yield", "sleep"}) {
    WaitSetting setting(value);
    comm::Communicator world;
    auto reducer =
        comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::automatic, {});
    std::shared_ptr<float> region = reducer->shared_buffers(kRegionFloats * sizeof(float));
    auto ring = comm::allreduce::make_allreducer(world, comm::allreduce::Algorithm::ring, {});
    for (size_t count : {size_t(1), size_t(p + 1), size_t(7919), size_t(1) << 17,
                         (size_t(1) << 17) + 1, size_t(1) << 18, size_t(0)}) {
      std::vector<float> plain = rt_test::small_int_data(rank, count);
      ring->sum(plain.data(), count);
      BOOST_TEST(rt_test::all_ok(rt_test::first_wrong_small_int_sum(plain, p) < 0),
                 value << ": ring, count " << count);
      BOOST_TEST(rt_test::identical_on_every_rank(plain), value << ": ring, count " << count);
      if (!region) continue;
      float* data = region.get() + 3;  // not cache-line aligned, as packed buckets are
      if (count + 3 > kRegionFloats) continue;
      const std::vector<float> mine = rt_test::small_int_data(rank, count);
      std::copy(mine.begin(), mine.end(), data);
      reducer->sum(data, count);
      const std::vector<float> got = slice(data, count);
      BOOST_TEST(rt_test::all_ok(rt_test::first_wrong_small_int_sum(got, p) < 0),
                 value << ": buckets, count " << count);
      BOOST_TEST(rt_test::identical_on_every_rank(got), value << ": buckets, count " << count);
    }
    if (!region) continue;
    int64_t wrong = 0;
    for (int call = 0; call < 200; ++call) {
      const size_t count = 1000 + size_t(call % 5) * 4001;
      float* data = region.get() + (call % 2) * 65536;
      for (size_t i = 0; i < count; ++i) data[i] = float((rank + 1) * (call + 1) + int(i % 5));
      reducer->sum(data, count);
      for (size_t i = 0; i < count; ++i)
        wrong += data[i] != float((call + 1) * p * (p + 1) / 2 + p * int(i % 5));
      std::fill(data, data + count, -1e30f);  // what a lagging peer must never read
    }
    BOOST_TEST(rt_test::all_ok(wrong == 0), value << ": " << wrong << " wrong elements");
  }
}

BOOST_AUTO_TEST_SUITE_END()
