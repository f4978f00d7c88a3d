// test_local_gate.cpp — LocalGate: no rank leaves a ticket before every rank on the node has
// arrived at it, over many tickets (the first one from fresh slots) with a different late rank
// each time; alone, it is off.
// np: 1 2 3 4
// quick: 2
#define BOOST_TEST_MODULE local_gate
#define OMPI_SKIP_MPICXX 1
#include <chrono>
#include <vector>

#include "mpi_test.hpp"
#include "ringtrain/comm/shm/local_gate.hpp"

RT_MPI_TEST_MAIN

using ringtrain::comm::shm::LocalGate;

namespace {

// steady_clock is CLOCK_MONOTONIC: one clock for every process on the node.
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Work that keeps this rank away from the gate for a while (no sleep: the late rank stays
// runnable, like a rank still in backward).
float busy_work(int rounds) {
  volatile float x = 1.0f;
  for (int i = 0; i < rounds * 100000; ++i) x = x * 1.0000001f + 1e-7f;
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(nobody_leaves_a_ticket_before_everyone_arrived) {
  const int rank = rt_test::world_rank(), world = rt_test::world_size();
  // The gate holds the ranks of this node (a hostname) only: one node on one machine, one per
  // namespace in jobs/local/cluster.sh. Ranks on other nodes pass their own gates.
  const rt_test::Topology topo = rt_test::topology();
  LocalGate gate(MPI_COMM_WORLD);
  BOOST_TEST(gate.local_size() == topo.local_size);
  BOOST_TEST(gate.problem() == "");
  BOOST_TEST(gate.active() == (topo.local_size > 1));
  const int tickets = 200;
  std::vector<int64_t> arrived(tickets), left(tickets);
  for (int t = 0; t < tickets; ++t) {
    if (t % world == rank) busy_work(1 + t % 3);  // a different late rank each ticket
    arrived[t] = now_ns();
    gate.arrive_and_wait(uint32_t(t + 1));
    left[t] = now_ns();
  }
  std::vector<int64_t> all_arrived(size_t(tickets) * world);
  MPI_Allgather(arrived.data(), tickets, MPI_INT64_T, all_arrived.data(), tickets, MPI_INT64_T,
                MPI_COMM_WORLD);
  int early = 0;
  for (int t = 0; t < tickets; ++t)
    for (int r = 0; r < world; ++r)
      if (topo.node_of[r] == topo.node) early += left[t] < all_arrived[size_t(r) * tickets + t];
  BOOST_TEST(rt_test::all_ok(early == 0),
             "rank " << rank << " left " << early << " tickets before a peer on its node arrived");
}
