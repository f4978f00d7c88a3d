// test_ring_allreduce_large.cpp — 64 Mi floats (256 MiB a rank) through ring, rhd, auto,
// hierarchical and mpi: on every rank bitwise the exact sums (so bitwise-identical results), where
// chunk and segment counts are large.
// np: 2 4
// quick: none
// Across emulated nodes 2x2 only: there ranks_per_node = 2 is the real grouping.
// nodes: 2x2
#define BOOST_TEST_MODULE ring_allreduce_large
#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <cstring>

#include "allreduce_test_data.hpp"
#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;

BOOST_AUTO_TEST_CASE(sixty_four_mebi_floats_sum_exactly) {
  comm::Communicator world;
  const size_t count = size_t(64) << 20;
  comm::allreduce::AllreduceOptions options;
  options.validate_counts = true;
  options.ranks_per_node = 2;
  // The inputs and the exact sums, computed once for every algorithm.
  const std::vector<float> input = rt_test::small_int_data(world.rank(), count);
  const std::vector<float> expected = rt_test::small_int_sums(world.size(), count);
  // One buffer refilled for each algorithm: a new 256 MiB vector each time would be 256 MiB
  // of page faults and zeroing again on every rank.
  std::vector<float> data(count);
  for (auto algorithm :
       {comm::allreduce::Algorithm::ring, comm::allreduce::Algorithm::rhd,
        comm::allreduce::Algorithm::automatic, comm::allreduce::Algorithm::hierarchical,
        comm::allreduce::Algorithm::mpi}) {
    auto reducer = comm::allreduce::make_allreducer(world, algorithm, options);
    std::copy(input.begin(), input.end(), data.begin());
    reducer->sum(data.data(), count);
    // Bitwise against the exact sums, which every rank computed alike: so also bitwise the same
    // on every rank, without sending 256 MiB to compare (the sums hold no -0: small_int gives
    // +0, and no order of additions turns it negative).
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i)
      wrong += std::memcmp(&data[i], &expected[i], sizeof(float)) != 0;
    BOOST_TEST(rt_test::all_ok(wrong == 0),
               reducer->name() << ": " << wrong << " sums not bitwise the exact ones");
  }
}
