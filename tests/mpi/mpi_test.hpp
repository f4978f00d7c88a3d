// mpi_test.hpp — what every MPI test shares: MPI start-up as a Boost.Test global fixture,
// a watchdog that turns a hang into a failure, and all-ranks agreement on a failure.
#pragma once

#define BOOST_TEST_DYN_LINK
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

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
