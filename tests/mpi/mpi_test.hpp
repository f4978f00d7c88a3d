// mpi_test.hpp — what every MPI test shares: MPI start-up as a Boost.Test global fixture,
// a watchdog that turns a hang into a failure, all-ranks agreement on a failure and on a
// vector's bytes, and the node topology as the hostnames tell it.
#pragma once

#define BOOST_TEST_DYN_LINK
#include <mpi.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace rt_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// True on every rank when ok is true on every rank: failures are reported together.
inline bool all_ok(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all == 1;
}

// Collective: whether this rank holds the same bytes as rank 0 (this rank's verdict; all_ok
// gathers them).
inline bool same_bytes_as_rank0(const std::vector<float>& mine) {
  std::vector<float> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size() * sizeof(float)), MPI_BYTE, 0,
            MPI_COMM_WORLD);
  // memcmp's pointers must not be null, even for no bytes (an empty vector's may be).
  return mine.empty() || std::memcmp(root.data(), mine.data(), mine.size() * sizeof(float)) == 0;
}

// Collective: whether every rank holds the same bytes (the same verdict on every rank).
inline bool identical_on_every_rank(const std::vector<float>& mine) {
  return all_ok(same_bytes_as_rank0(mine));
}

// The nodes mpirun gave this job, read from hostnames alone (not from the code under test, whose
// node split the tests check against it): a node is a distinct hostname, nodes are numbered by
// their lowest world rank, and a rank's local rank is its place among its node's ranks.
struct Topology {
  int nodes = 1, node = 0, local_rank = 0, local_size = 1;
  std::vector<int> node_of;        // node of each world rank
  std::vector<int> local_rank_of;  // local rank of each world rank
};

// Collective on MPI_COMM_WORLD.
inline Topology topology() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  const int p = world_size(), me = world_rank();
  std::vector<char> all(size_t(p) * sizeof(name));
  MPI_Allgather(name, sizeof(name), MPI_CHAR, all.data(), sizeof(name), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> hosts, seen;
  for (int r = 0; r < p; ++r) hosts.emplace_back(&all[size_t(r) * sizeof(name)]);
  Topology t;
  std::vector<int> count;
  for (int r = 0; r < p; ++r) {
    size_t n = 0;
    while (n < seen.size() && seen[n] != hosts[r]) ++n;
    if (n == seen.size()) seen.push_back(hosts[r]), count.push_back(0);
    t.node_of.push_back(int(n));
    t.local_rank_of.push_back(count[n]++);
  }
  t.nodes = int(seen.size());
  t.node = t.node_of[me];
  t.local_rank = t.local_rank_of[me];
  t.local_size = count[t.node];
  return t;
}

struct MpiFixture {
  MpiFixture() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    // A detached watchdog: a test that hangs fails loudly instead of stalling CI.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(300));
      std::fprintf(stderr, "watchdog: rank %d still running after 300 s: hang\n", world_rank());
      std::_Exit(3);
    }).detach();
  }
  ~MpiFixture() { MPI_Finalize(); }
};

}  // namespace rt_test

// Use in exactly one .cpp of each MPI test binary, after BOOST_TEST_MODULE. Boost pastes the
// fixture's name into an identifier, so it must be unqualified.
using RtMpiFixture = rt_test::MpiFixture;
#define RT_MPI_TEST_MAIN BOOST_TEST_GLOBAL_FIXTURE(RtMpiFixture);
