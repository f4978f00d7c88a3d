// test_shm_ring.cpp — ShmRing: every message arrives whole, in order, from the left neighbour,
// with K = 1, 2 and 4 slots, across the 2^32 wrap of the message count, whatever rank is late;
// ranks on more than one node are refused with the reason; a slot count that is not a power of
// two is refused.
// np: 2 3 4
// quick: 2
#define BOOST_TEST_MODULE shm_ring
#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test.hpp"
#include "ringtrain/comm/shm/shm_ring.hpp"
#include "ringtrain/core/error.hpp"

RT_MPI_TEST_MAIN

using ringtrain::comm::shm::ShmRing;

namespace {

constexpr size_t kSlotBytes = 200;  // not a cache-line multiple: the ring rounds it up to 256

// Work that keeps this rank away for a while (no sleep: a late rank stays runnable).
float busy_work(int rounds) {
  volatile float x = 1.0f;
  for (int i = 0; i < rounds * 20000; ++i) x = x * 1.0000001f + 1e-7f;
  return x;
}

// Message m from `sender`: every byte a function of both, so a stale or torn slot shows.
void fill(unsigned char* slot, int sender, uint32_t m) {
  for (size_t i = 0; i < kSlotBytes; ++i)
    slot[i] = static_cast<unsigned char>(sender * 31 + m * 7 + i);
}
bool holds(const unsigned char* slot, int sender, uint32_t m) {
  for (size_t i = 0; i < kSlotBytes; ++i)
    if (slot[i] != static_cast<unsigned char>(sender * 31 + m * 7 + i)) return false;
  return true;
}

// The ranks on this rank's node (a hostname): a ShmRing lives within one node. On one machine
// that is every rank; in jobs/local/cluster.sh one namespace's ranks.
class NodeRanks {
 public:
  NodeRanks() {
    MPI_Comm_split(MPI_COMM_WORLD, rt_test::topology().node, rt_test::world_rank(), &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~NodeRanks() { MPI_Comm_free(&comm_); }
  NodeRanks(const NodeRanks&) = delete;
  NodeRanks& operator=(const NodeRanks&) = delete;
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The message tests need a neighbour on the node; the same answer on every rank.
  bool every_node_has_two() const {
    const bool yes = rt_test::all_ok(size_ >= 2);
    if (!yes) BOOST_TEST_MESSAGE("a node with one rank: no ring to test there");
    return yes;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace

BOOST_AUTO_TEST_CASE(messages_arrive_whole_and_in_order_across_the_wrap) {
  NodeRanks node;
  if (!node.every_node_has_two()) return;
  const int rank = node.rank(), world = node.size();
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  for (int slots : {1, 2, 4}) {
    const uint32_t first = 0xFFFFFFFFu - 40;  // the count wraps after 41 messages
    std::string why_not;
    auto ring = ShmRing::try_make(node.comm(), right, slots, kSlotBytes, why_not, first);
    BOOST_TEST(why_not == "");
    BOOST_REQUIRE(rt_test::all_ok(ring != nullptr));
    BOOST_TEST(ring->slot_bytes() == 256u);
    int wrong = 0;
    for (uint32_t k = 0; k < 300; ++k) {
      const uint32_t m = first + k;
      if (k % 7 == uint32_t(rank) % 7) busy_work(1 + int(k % 3));  // a different late rank
      fill(static_cast<unsigned char*>(ring->claim_send_slot()), rank, m);
      ring->send_claimed();
      wrong += !holds(static_cast<const unsigned char*>(ring->wait_message()), left, m);
      ring->release_message();
    }
    BOOST_TEST(rt_test::all_ok(wrong == 0),
               "rank " << rank << ", " << slots << " slots: " << wrong << " of 300 messages wrong");
  }
}

// A sender may run up to K messages ahead of a receiver that is away; the K+1-th waits.
BOOST_AUTO_TEST_CASE(a_sender_runs_k_messages_ahead_of_an_absent_receiver) {
  NodeRanks node;
  if (!node.every_node_has_two()) return;
  const int rank = node.rank(), world = node.size();
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  std::string why_not;
  auto ring = ShmRing::try_make(node.comm(), right, 4, kSlotBytes, why_not);
  BOOST_REQUIRE(rt_test::all_ok(ring != nullptr));
  // Everyone sends 4 before receiving any: with 4 slots this must not block.
  for (uint32_t m = 0; m < 4; ++m) {
    fill(static_cast<unsigned char*>(ring->claim_send_slot()), rank, m);
    ring->send_claimed();
  }
  int wrong = 0;
  for (uint32_t m = 0; m < 4; ++m) {
    wrong += !holds(static_cast<const unsigned char*>(ring->wait_message()), left, m);
    ring->release_message();
  }
  BOOST_TEST(rt_test::all_ok(wrong == 0));
}

// Ranks on more than one node get no ring, on every rank, and the reason; on one node, a ring.
BOOST_AUTO_TEST_CASE(ranks_on_more_than_one_node_get_no_ring_and_the_reason) {
  const int p = rt_test::world_size();
  const int nodes = rt_test::topology().nodes;
  std::string why_not;
  auto ring =
      ShmRing::try_make(MPI_COMM_WORLD, (rt_test::world_rank() + 1) % p, 2, kSlotBytes, why_not);
  if (nodes > 1) {
    BOOST_TEST(why_not == "the " + std::to_string(p) + " ranks span more than one node");
    BOOST_TEST(rt_test::all_ok(ring == nullptr));
  } else {
    BOOST_TEST(why_not == "");
    BOOST_TEST(rt_test::all_ok(ring != nullptr));
  }
}

BOOST_AUTO_TEST_CASE(slot_counts_that_are_not_a_power_of_two_are_refused) {
  std::string why_not, message;
  try {
    ShmRing::try_make(MPI_COMM_WORLD, 0, 3, kSlotBytes, why_not);
  } catch (const ringtrain::Error& e) {
    message = e.what();
  }
  const std::string expected =
      "shared-memory ring slots must be a power of two from 1 to 64, not 3";
  // RT_CHECK puts the source file and line in front.
  BOOST_TEST(message.size() > expected.size());
  BOOST_TEST(message.substr(message.size() - std::min(message.size(), expected.size())) ==
             expected);
}
