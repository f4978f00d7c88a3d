// test_communicator.cpp — ranks, nodes and ring order, the ranks-per-node split, the CPU share,
// and the checked collectives the trainer and results writer use instead of MPI.
// np: 1 2 3 4
// quick: 2
#define BOOST_TEST_MODULE communicator
#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <numeric>

#include "mpi_test.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;

BOOST_AUTO_TEST_CASE(ranks_and_real_nodes_follow_the_hostnames) {
  comm::Communicator world;
  BOOST_TEST(world.rank() == rt_test::world_rank());
  BOOST_TEST(world.size() == rt_test::world_size());
  BOOST_TEST(log::rank() == world.rank());
  BOOST_TEST(log::world_size() == world.size());
  // A node is a hostname (one on a single machine, one per namespace in jobs/local/cluster.sh):
  // nodes numbered by their lowest rank, local ranks in world order, the ring visits each
  // node's ranks together (world order where mpirun placed consecutive ranks on a node).
  const rt_test::Topology topo = rt_test::topology();
  BOOST_TEST_MESSAGE("rank " << world.rank() << " on " << world.hostname() << ": node " << topo.node
                             << " of " << topo.nodes);
  BOOST_TEST(world.node_count() == topo.nodes);
  BOOST_TEST(world.node_index() == topo.node);
  BOOST_TEST(world.local_size() == topo.local_size);
  BOOST_TEST(world.local_rank() == topo.local_rank);
  std::vector<int> ring(world.size());
  std::iota(ring.begin(), ring.end(), 0);
  std::stable_sort(ring.begin(), ring.end(),
                   [&](int a, int b) { return topo.node_of[a] < topo.node_of[b]; });
  BOOST_TEST(world.ring_order() == ring);
  BOOST_TEST(!world.hostname().empty());
  BOOST_TEST(world.cpu_threads_per_rank() >= 1);
  BOOST_TEST(world.cpu_threads_description().find("per rank") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(ranks_per_node_split_makes_nodes_of_consecutive_ranks) {
  comm::CommunicatorOptions options;
  options.ranks_per_node = 2;
  comm::Communicator world(options);
  const int p = world.size(), r = world.rank();
  BOOST_TEST(world.node_count() == (p + 1) / 2);
  BOOST_TEST(world.node_index() == r / 2);
  BOOST_TEST(world.local_rank() == r % 2);
  BOOST_TEST(world.local_size() == std::min(2, p - (r / 2) * 2));
  world.split_nodes(3);
  BOOST_TEST(world.node_count() == (p + 2) / 3);
  BOOST_TEST(world.local_rank() == r % 3);
  BOOST_CHECK_THROW(world.split_nodes(-1), InputError);
}

BOOST_AUTO_TEST_CASE(all_ok_is_false_everywhere_when_one_rank_fails) {
  comm::Communicator world;
  BOOST_TEST(world.all_ok(true));
  BOOST_TEST(!world.all_ok(world.rank() != world.size() - 1));
  world.barrier();
}

BOOST_AUTO_TEST_CASE(sums_gathers_and_broadcasts) {
  comm::Communicator world;
  const int p = world.size(), r = world.rank();
  std::vector<double> values = {double(r), 0.5, -double(r) * r};
  world.allreduce_sum(values.data(), values.size());
  BOOST_TEST(values[0] == p * (p - 1) / 2.0);
  BOOST_TEST(values[1] == 0.5 * p);

  std::vector<double> gathered = world.gather_to_root({double(r), double(10 * r)});
  if (r == 0) {
    std::vector<double> expected;
    for (int q = 0; q < p; ++q) expected.insert(expected.end(), {double(q), double(10 * q)});
    BOOST_TEST(gathered == expected);
  } else {
    BOOST_TEST(gathered.empty());
  }

  std::vector<std::string> names = world.gather_strings_to_root(std::string(r, 'x') + "host");
  if (r == 0) {
    BOOST_TEST(names.size() == size_t(p));
    for (int q = 0; q < p; ++q) BOOST_TEST(names[q] == std::string(q, 'x') + "host");
  } else {
    BOOST_TEST(names.empty());
  }

  std::vector<uint8_t> bytes;
  if (r == p - 1) bytes = {1, 2, 3, 250};
  world.broadcast(bytes, p - 1);
  BOOST_TEST((bytes == std::vector<uint8_t>{1, 2, 3, 250}));
}

BOOST_AUTO_TEST_CASE(gather_with_unequal_counts_fails_on_every_rank) {
  comm::Communicator world;
  const int p = world.size();
  std::vector<double> mine(world.rank() == 0 ? 2 : 3, 1.0);
  std::string message;
  try {
    world.gather_to_root(mine);
  } catch (const Error& e) {
    message = e.what();
  }
  const std::string expected =
      p == 1 ? ""
             : "gather_to_root: ranks pass different counts (between 2 and 3); every rank must "
               "pass the same number of values";
  BOOST_TEST(message == expected);
  BOOST_TEST(rt_test::all_ok(message == expected));
}

BOOST_AUTO_TEST_CASE(mpi_check_names_the_call_rank_host_and_mpi_text) {
  comm::Communicator world;
  std::string message;
  try {
    MPI_CHECK(MPI_Send(nullptr, 0, MPI_BYTE, world.size() + 5, 0, world.raw()));
  } catch (const Error& e) {
    message = e.what();
  }
  const std::string start =
      str("MPI_Send(nullptr, 0, MPI_BYTE, world.size() + 5, 0, world.raw()) "
          "failed on rank ",
          world.rank(), " (host ", world.hostname(), ") at ");
  BOOST_TEST(message.rfind(start, 0) == 0, message);
  BOOST_TEST(message.find("test_communicator.cpp:") != std::string::npos, message);
  BOOST_TEST(message.find("MPI_ERR_RANK: invalid rank") != std::string::npos, message);
}
