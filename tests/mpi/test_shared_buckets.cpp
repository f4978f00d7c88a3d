// test_shared_buckets.cpp — the node's shared fusion buffers reduced in place: exact sums at
// awkward counts and offsets, bitwise equal across ranks, a caller that rewrites its bucket
// the moment a call returns, a non-main thread; none across nodes.
// np: 1 2 3 4 5
// quick: 2
#define BOOST_TEST_MODULE shared_buckets
#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <cstring>
#include <thread>

#include "allreduce_test_data.hpp"
#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shm/shared_buckets.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::allreduce::Algorithm;

namespace {

constexpr size_t kArenaFloats = (size_t(1) << 20) + 4096;

std::vector<float> slice(const float* data, size_t count) {
  return std::vector<float>(data, data + count);
}

// The shared buffers of a ring made as the trainer makes it, or null across nodes.
struct Arena {
  comm::Communicator world;
  std::unique_ptr<comm::allreduce::Allreducer> reducer =
      comm::allreduce::make_allreducer(world, Algorithm::automatic, {});
  std::shared_ptr<float> memory = reducer->shared_buffers(kArenaFloats * sizeof(float));
};

}  // namespace

// One node: every rank gets memory; several nodes: none does, and the ring is used as before.
BOOST_AUTO_TEST_CASE(made_on_one_node_and_nowhere_else) {
  Arena arena;
  const bool one_node = arena.world.node_count() == 1;
  const bool expect = one_node && arena.world.size() > 1;
  BOOST_TEST(rt_test::all_ok((arena.memory != nullptr) == expect));
  // Once per instance.
  BOOST_TEST(arena.reducer->shared_buffers(64) == nullptr);
  // Not for a narrow wire: its rounding is part of what the ring sends.
  comm::allreduce::AllreduceOptions bf16;
  bf16.wire = comm::allreduce::Wire::bf16;
  auto narrow = comm::allreduce::make_allreducer(arena.world, Algorithm::ring, bf16);
  BOOST_TEST(narrow->shared_buffers(4096) == nullptr);
}

// Sums of small integers are exact in any order: every element checked, on every rank, and
// every rank holds the same bytes. Offsets are those of buckets packed after one another.
BOOST_AUTO_TEST_CASE(exact_sums_at_awkward_counts_and_offsets) {
  Arena arena;
  if (!arena.memory) return;
  const int p = arena.world.size();
  float* base = arena.memory.get();
  size_t offset = 0;
  for (size_t count : {size_t(1), size_t(p - 1), size_t(p), size_t(p + 1), size_t(7919),
                       size_t(1) << 20, size_t(5), size_t(0)}) {
    if (offset + count > kArenaFloats) offset = 0;
    std::vector<float> mine = rt_test::small_int_data(arena.world.rank(), count);
    std::copy(mine.begin(), mine.end(), base + offset);
    arena.reducer->sum(base + offset, count);
    const std::vector<float> got = slice(base + offset, count);
    BOOST_TEST(rt_test::all_ok(rt_test::first_wrong_small_int_sum(got, p) < 0),
               "count " << count << " at offset " << offset);
    BOOST_TEST(rt_test::same_bytes_as_rank0(got));
    offset += (count + 15) / 16 * 16 + 3;  // the next bucket, not cache-line aligned
  }
}

// The mean, as the engine asks for it: sum, then one division (the ring's rounding).
BOOST_AUTO_TEST_CASE(sum_and_divide_rounds_as_a_sum_then_a_division) {
  Arena arena;
  if (!arena.memory) return;
  const int p = arena.world.size();
  const size_t count = 100003;
  float* data = arena.memory.get() + 32;
  for (size_t i = 0; i < count; ++i) data[i] = rt_test::noise(arena.world.rank(), i);
  arena.reducer->sum_and_divide(data, count, float(3 * p));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float sum = rt_test::noise(0, i);
    for (int r = 1; r < p; ++r) sum += rt_test::noise(r, i);
    wrong += data[i] != sum / float(3 * p);
  }
  BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " elements differ from (rank-order sum) / 3p");
}

// A caller writes its next data into the bucket the moment a call returns, as backward does.
// Were a rank to leave while a peer still copied its part, that peer would read the new data:
// a wrong sum somewhere in 300 calls of alternating buckets and sizes.
BOOST_AUTO_TEST_CASE(a_bucket_rewritten_at_once_after_each_call_is_never_read_early) {
  Arena arena;
  if (!arena.memory) return;
  const int p = arena.world.size(), rank = arena.world.rank();
  float* buckets[2] = {arena.memory.get(), arena.memory.get() + 4096 * 16};
  int64_t wrong = 0;
  for (int call = 0; call < 300; ++call) {
    const size_t count = 1000 + size_t(call % 7) * 3001;
    float* data = buckets[call % 2];
    for (size_t i = 0; i < count; ++i) data[i] = float((rank + 1) * (call + 1) + int(i % 5));
    arena.reducer->sum(data, count);
    for (size_t i = 0; i < count; ++i) {
      const float expected = float((call + 1) * p * (p + 1) / 2 + p * int(i % 5));
      wrong += data[i] != expected;
    }
    // Overwritten at once: garbage a lagging peer must never see.
    std::fill(data, data + count, -1e30f);
  }
  BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " wrong elements");
}

// The fusion engine's comm thread calls while the main thread keeps using MPI.
BOOST_AUTO_TEST_CASE(works_from_a_non_main_thread) {
  Arena arena;
  if (!arena.memory) return;
  const size_t count = 50021;
  float* data = arena.memory.get() + 1024;
  const std::vector<float> mine = rt_test::small_int_data(arena.world.rank(), count);
  std::copy(mine.begin(), mine.end(), data);
  std::thread worker([&] { arena.reducer->sum(data, count); });
  for (int i = 0; i < 3; ++i) arena.world.barrier();
  worker.join();
  BOOST_TEST(rt_test::all_ok(
      rt_test::first_wrong_small_int_sum(slice(data, count), arena.world.size()) < 0));
}

// For a stall report, the reduction says whom it waits for: rank 0 enters a call alone and, while
// its peers have not arrived, names them; its stages count as progress once the call is done.
BOOST_AUTO_TEST_CASE(a_waiting_call_names_the_peers_it_waits_for) {
  Arena arena;
  if (!arena.memory) return;
  const int me = arena.world.rank(), n = arena.world.size();
  float* data = arena.memory.get();
  std::fill(data, data + 64, 1.0f);
  const uint64_t before = arena.reducer->progress();
  std::string seen;
  std::thread alone;
  if (me == 0) {
    alone = std::thread([&] { arena.reducer->sum(data, 64); });
    // Until rank 0 has published its arrival and waits (no clock: the state is the condition).
    while (seen.find("to arrive") == std::string::npos) {
      seen = arena.reducer->on_stall();
      std::this_thread::yield();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0)
    alone.join();
  else
    arena.reducer->sum(data, 64);
  std::string peers;
  for (int r = 1; r < n; ++r) peers += (r > 1 ? ", " : "") + std::to_string(r);
  if (me == 0)
    BOOST_TEST(seen == "auto chose ring/shm waits in the node's shared buckets for rank(s) " +
                           peers + " to arrive (call 1)");
  BOOST_TEST(arena.reducer->on_stall() == "");          // between calls: nothing to say
  BOOST_TEST(arena.reducer->progress() == before + 3);  // arrive, reduce, leave
  BOOST_TEST(rt_test::all_ok(data[0] == float(n)));
}
