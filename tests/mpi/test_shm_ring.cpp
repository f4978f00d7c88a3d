// test_shm_ring.cpp — ShmRing: every message arrives whole, in order, from the left neighbour,
// with K = 1, 2 and 4 slots, across the 2^32 wrap of the message count, whatever rank is late;
// a slot count that is not a power of two is refused.
// np: 2 3 4
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

}  // namespace

BOOST_AUTO_TEST_CASE(messages_arrive_whole_and_in_order_across_the_wrap) {
  const int rank = rt_test::world_rank(), world = rt_test::world_size();
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  for (int slots : {1, 2, 4}) {
    const uint32_t first = 0xFFFFFFFFu - 40;  // the count wraps after 41 messages
    std::string why_not;
    auto ring = ShmRing::try_make(MPI_COMM_WORLD, right, slots, kSlotBytes, why_not, first);
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
  const int rank = rt_test::world_rank(), world = rt_test::world_size();
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  std::string why_not;
  auto ring = ShmRing::try_make(MPI_COMM_WORLD, right, 4, kSlotBytes, why_not);
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
