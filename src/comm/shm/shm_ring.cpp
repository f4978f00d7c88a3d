// shm_ring.cpp — the ring's shared-memory inboxes and their futex waits (see shm_ring.hpp).
#include "ringtrain/comm/shm/shm_ring.hpp"

#include <new>

#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/comm/shm/futex.hpp"
#include "ringtrain/comm/shm/shared_segment.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::shm {
namespace {

constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 2 * kLine;  // published, consumed: a cache line each

size_t round_up(size_t bytes, size_t to) {
  return (bytes + to - 1) / to * to;
}

}  // namespace

struct ShmRing::Inbox {
  std::atomic<uint32_t>* published;
  std::atomic<uint32_t>* consumed;
  char* slots;
};

std::unique_ptr<ShmRing> ShmRing::try_make(MPI_Comm comm, int right, int slots, size_t slot_bytes,
                                           std::string& why_not, uint32_t first_message) {
  RT_CHECK(slots >= 1 && slots <= 64 && (slots & (slots - 1)) == 0,
           "shared-memory ring slots must be a power of two from 1 to 64, not ", slots);
#if defined(__linux__)
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // All of comm on this node: local ranks are comm ranks, and inboxes go by comm rank.
  CommHandle node = whole_comm_on_this_node(comm, why_not);
  if (!node.valid()) return nullptr;
  std::string wait_why;
  const WaitStyle wait_style = choose_wait_style(node.get(), wait_why);
  slot_bytes = round_up(slot_bytes, kLine);
  const size_t inbox_bytes = kHeaderBytes + size_t(slots) * slot_bytes;
  auto segment = std::make_unique<SharedSegment>(node.get(), size_t(size) * inbox_bytes, "ring");
  if (!segment->data()) {
    why_not = segment->problem();
    return nullptr;
  }
  std::unique_ptr<ShmRing> ring(
      new ShmRing(std::move(segment), rank, right, slots, slot_bytes, first_message, wait_style));
  // Nobody may publish before every rank has constructed the counters.
  MPI_CHECK(MPI_Barrier(node.get()));
  return ring;
#else
  (void)comm, (void)right, (void)slots, (void)slot_bytes, (void)first_message;
  why_not = "futexes are Linux only";
  return nullptr;
#endif
}

ShmRing::ShmRing(std::unique_ptr<SharedSegment> segment, int rank, int right, int slots,
                 size_t slot_bytes, uint32_t first_message, WaitStyle wait_style)
    : segment_(std::move(segment)),
      rank_(rank),
      right_(right),
      slots_(slots),
      slot_bytes_(slot_bytes),
      inbox_bytes_(kHeaderBytes + size_t(slots) * slot_bytes),
      sent_(first_message),
      received_(first_message),
      wait_style_(wait_style) {
  char* mine = static_cast<char*>(segment_->data()) + size_t(rank_) * inbox_bytes_;
  new (mine) std::atomic<uint32_t>(first_message);
  new (mine + kLine) std::atomic<uint32_t>(first_message);
}

ShmRing::~ShmRing() = default;

ShmRing::Inbox ShmRing::inbox(int rank) const {
  char* base = static_cast<char*>(segment_->data()) + size_t(rank) * inbox_bytes_;
  return {std::launder(reinterpret_cast<std::atomic<uint32_t>*>(base)),
          std::launder(reinterpret_cast<std::atomic<uint32_t>*>(base + kLine)),
          base + kHeaderBytes};
}

#if defined(__linux__)
void* ShmRing::claim_send_slot() {
  const Inbox to = inbox(right_);
  // Slot sent_ % K last held message sent_ - K: the neighbour must have consumed it.
  wait_until_reached(*to.consumed, sent_ + 1 - uint32_t(slots_), spin_hint_, wait_style_);
  return to.slots + size_t(sent_ % uint32_t(slots_)) * slot_bytes_;
}

void ShmRing::send_claimed() {
  publish_and_wake(*inbox(right_).published, ++sent_);
}

const void* ShmRing::wait_message() {
  const Inbox mine = inbox(rank_);
  wait_until_reached(*mine.published, received_ + 1, spin_hint_, wait_style_);
  return mine.slots + size_t(received_ % uint32_t(slots_)) * slot_bytes_;
}

void ShmRing::release_message() {
  publish_and_wake(*inbox(rank_).consumed, ++received_);
}
#else
void* ShmRing::claim_send_slot() {
  return nullptr;
}
void ShmRing::send_claimed() {}
const void* ShmRing::wait_message() {
  return nullptr;
}
void ShmRing::release_message() {}
#endif

}  // namespace ringtrain::comm::shm
