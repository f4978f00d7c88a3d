// local_gate.cpp — the node's shared ticket slots (POSIX shm) and the futex wait on them.
#include "ringtrain/comm/local_gate.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/core/error.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

namespace ringtrain::comm {
namespace {

constexpr size_t kSlotBytes = 64;  // one cache line per rank: no false sharing between slots
constexpr size_t kNameBytes = 64;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word must be a plain, lock-free 32-bit atomic");

#if defined(__linux__)
// Shared (not FUTEX_PRIVATE) operations: the word lives in memory mapped by several processes.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
#endif

// True when `have` is at or past `want`, modulo 2^32.
bool reached(uint32_t have, uint32_t want) {
  return static_cast<int32_t>(have - want) >= 0;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Maps the segment `name` (creating it when `create`); nullptr and `problem` on failure.
void* map_segment(const char* name, size_t bytes, bool create, std::string& problem) {
  int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0);
  if (fd < 0) {
    problem = errno_text("shm_open");
    return nullptr;
  }
  if (create && ftruncate(fd, off_t(bytes)) != 0) {  // zero-filled: every ticket starts at 0
    problem = errno_text("ftruncate");
    close(fd);
    return nullptr;
  }
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) {
    problem = errno_text("mmap");
    return nullptr;
  }
  return memory;
}

}  // namespace

LocalGate::LocalGate(MPI_Comm comm) {
#if defined(__linux__)
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &raw));
  CommHandle node(raw);
  MPI_CHECK(MPI_Comm_rank(node.get(), &local_rank_));
  MPI_CHECK(MPI_Comm_size(node.get(), &local_size_));
  if (local_size_ == 1) return;

  // The node's first rank creates the segment under a name unique to its process and this
  // gate; the others open it; once all have it mapped (or failed), the name is removed, so
  // nothing is left in /dev/shm however the job ends.
  static std::atomic<int> gates_made{0};
  char name[kNameBytes] = {};
  if (local_rank_ == 0)
    std::snprintf(name, sizeof name, "/ringtrain-gate-%ld-%d", long(getpid()), gates_made++);
  MPI_CHECK(MPI_Bcast(name, int(sizeof name), MPI_CHAR, 0, node.get()));
  const size_t bytes = size_t(local_size_) * kSlotBytes;
  int mapped = 0;
  void* memory = nullptr;
  if (local_rank_ == 0) {
    memory = map_segment(name, bytes, true, problem_);
    mapped = memory != nullptr;
    MPI_CHECK(MPI_Bcast(&mapped, 1, MPI_INT, 0, node.get()));
  } else {
    MPI_CHECK(MPI_Bcast(&mapped, 1, MPI_INT, 0, node.get()));
    if (mapped) memory = map_segment(name, bytes, false, problem_);
  }
  int all_mapped = memory != nullptr;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_mapped, 1, MPI_INT, MPI_MIN, node.get()));
  if (local_rank_ == 0 && mapped) shm_unlink(name);
  if (!all_mapped) {
    if (memory) munmap(memory, bytes);
    if (problem_.empty()) problem_ = "another rank on this node could not map the segment";
    problem_ = str("local gate ", name, ": ", problem_);
    return;
  }
  slots_ = memory;
  mapped_bytes_ = bytes;
  for (int r = 0; r < local_size_; ++r)
    new (static_cast<char*>(slots_) + size_t(r) * kSlotBytes) std::atomic<uint32_t>(0);
  // Nobody may publish a ticket before every rank has constructed the slots.
  MPI_CHECK(MPI_Barrier(node.get()));
#else
  (void)comm;
  problem_ = "local gate: futexes are Linux only";
#endif
}

LocalGate::~LocalGate() {
  if (slots_) munmap(slots_, mapped_bytes_);
}

std::atomic<uint32_t>& LocalGate::slot(int local_rank) const {
  return *std::launder(reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(slots_) +
                                                                size_t(local_rank) * kSlotBytes));
}

void LocalGate::arrive_and_wait(uint32_t ticket) {
  if (!slots_) return;
#if defined(__linux__)
  std::atomic<uint32_t>& mine = slot(local_rank_);
  mine.store(ticket, std::memory_order_release);
  futex_wake_all(mine);
  for (int r = 0; r < local_size_; ++r) {
    if (r == local_rank_) continue;
    std::atomic<uint32_t>& theirs = slot(r);
    // futex_wait returns at once if the word no longer holds `seen`, so no wake-up is lost.
    for (uint32_t seen = theirs.load(std::memory_order_acquire); !reached(seen, ticket);
         seen = theirs.load(std::memory_order_acquire))
      futex_wait(theirs, seen);
  }
#endif
}

}  // namespace ringtrain::comm
