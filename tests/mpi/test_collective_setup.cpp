// test_collective_setup.cpp — NCCL's set-up protocol with fake NCCL calls, so it runs without a
// GPU: every rank joins, or every rank fails with an error that names the rank that failed and
// why, and nothing waits forever (rank 0 failing before the id broadcast; a rank failing to
// start; a rank whose initialisation never finishes).
// np: 1 2 3
// quick: 2
#define BOOST_TEST_MODULE collective_setup
#define OMPI_SKIP_MPICXX 1
#include <string>

#include "mpi_test.hpp"
#include "ringtrain/comm/allreduce/collective_setup.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::allreduce::CollectiveSetupOps;

namespace {

const std::vector<uint8_t> kId = {7, 1, 2, 3, 250};

// A fake NCCL: the id and the start succeed unless told otherwise; the initialisation finishes
// after two polls, or never; the clock advances one second per poll.
struct FakeNccl {
  bool id_fails = false;
  bool start_fails = false;
  bool never_finishes = false;
  bool started = false;
  std::vector<uint8_t> joined_with;
  int polls = 0;
  int aborts = 0;  // with a communicator
  double clock = 0;

  CollectiveSetupOps ops() {
    CollectiveSetupOps o;
    o.make_id = [this] {
      if (id_fails) throw Error("ncclGetUniqueId: no socket interface found");
      return kId;
    };
    o.start = [this](const std::vector<uint8_t>& id) {
      if (start_fails) throw Error("ncclCommInitRankConfig: invalid usage");
      joined_with = id;
      started = true;
    };
    o.wait.finished = [this] { return !never_finishes && polls >= 2; };
    o.wait.async_error = [] { return std::string(); };
    o.wait.abort = [this] {
      if (started) ++aborts;
      started = false;  // ncclCommAbort frees it: a second abort has nothing to do
    };
    o.wait.now = [this] { return clock; };
    o.wait.pause = [this] {
      ++polls;
      clock += 1;
    };
    return o;
  }
};

std::string set_up(const comm::Communicator& world, FakeNccl& nccl, double timeout_s = 10) {
  try {
    comm::allreduce::set_up_collectively(world, "nccl set-up", timeout_s, nccl.ops());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_joins_with_rank_0s_id) {
  comm::Communicator world;
  FakeNccl nccl;
  BOOST_TEST(set_up(world, nccl) == "");
  BOOST_TEST((nccl.joined_with == kId));
  BOOST_TEST(nccl.aborts == 0);
  BOOST_TEST(nccl.started);
}

// Before: rank 0 threw before MPI_Bcast and every other rank waited in it forever.
BOOST_AUTO_TEST_CASE(rank_0_without_an_id_is_the_same_error_on_every_rank) {
  comm::Communicator world;
  std::vector<uint8_t> host(world.hostname().begin(), world.hostname().end());
  world.broadcast(host, 0);
  FakeNccl nccl;
  nccl.id_fails = world.rank() == 0;
  const std::string message = set_up(world, nccl);
  BOOST_TEST(message == "nccl set-up: rank 0 (host " + std::string(host.begin(), host.end()) +
                            ") could not make the unique id: ncclGetUniqueId: no socket "
                            "interface found");
  BOOST_TEST(!nccl.started);  // nobody entered NCCL's bootstrap
  BOOST_TEST(rt_test::all_ok(!message.empty()));
}

// The last rank fails to start after the others joined: they abort their communicator and say
// another rank failed; the last rank reports its own reason.
BOOST_AUTO_TEST_CASE(a_rank_that_fails_to_start_fails_every_rank) {
  comm::Communicator world;
  const int last = world.size() - 1;
  FakeNccl nccl;
  nccl.start_fails = world.rank() == last;
  const std::string message = set_up(world, nccl);
  if (world.rank() == last) {
    BOOST_TEST(message == "ncclCommInitRankConfig: invalid usage");
  } else {
    BOOST_TEST(message ==
               "nccl set-up: another rank failed (its error is reported too); communicator "
               "aborted");
    BOOST_TEST(nccl.aborts == 1);
  }
  BOOST_TEST(!nccl.started);
  BOOST_TEST(rt_test::all_ok(!message.empty()));
}

// Peers stuck in NCCL's bootstrap (a rank never joined): each one gives up at the deadline,
// aborts, and names itself; the set-up still ends on every rank.
BOOST_AUTO_TEST_CASE(an_initialisation_that_never_finishes_ends_at_the_timeout) {
  comm::Communicator world;
  const int last = world.size() - 1;
  FakeNccl nccl;
  nccl.start_fails = world.rank() == last;
  nccl.never_finishes = true;
  const std::string message = set_up(world, nccl, 5);
  if (world.rank() != last) {
    BOOST_TEST(message == "nccl set-up on rank " + std::to_string(world.rank()) + " (host " +
                              world.hostname() +
                              "): not finished after 5 s, and NCCL reports no error (a peer "
                              "stopped, or the network hangs); communicator aborted "
                              "(comm.stall_timeout_s sets the limit)");
    BOOST_TEST(nccl.aborts == 1);
    BOOST_TEST(nccl.polls == 5);
  }
  BOOST_TEST(!nccl.started);
  BOOST_TEST(rt_test::all_ok(!message.empty()));
}
