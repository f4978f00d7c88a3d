// shared_segment.cpp — create, open, map and unlink a node's POSIX shared-memory segment.
#include "ringtrain/comm/shm/shared_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::shm {
namespace {

constexpr size_t kNameBytes = 64;

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
  if (create && ftruncate(fd, off_t(bytes)) != 0) {  // zero-filled
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

CommHandle whole_comm_on_this_node(MPI_Comm comm, std::string& why_not) {
  int size = 1, local_size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  CommHandle node = split_shared_memory(comm);
  MPI_CHECK(MPI_Comm_size(node.get(), &local_size));
  if (local_size == size) return node;
  why_not = str("the ", size, " ranks span more than one node");
  return CommHandle();
}

SharedSegment::SharedSegment(MPI_Comm node_comm, size_t bytes, const char* what) {
  int local_rank = 0;
  MPI_CHECK(MPI_Comm_rank(node_comm, &local_rank));
  static std::atomic<int> segments_made{0};
  char name[kNameBytes] = {};
  if (local_rank == 0)
    std::snprintf(name, sizeof name, "/ringtrain-%s-%ld-%d", what, long(getpid()), segments_made++);
  MPI_CHECK(MPI_Bcast(name, int(sizeof name), MPI_CHAR, 0, node_comm));
  int created = 0;
  void* memory = nullptr;
  if (local_rank == 0) {
    memory = map_segment(name, bytes, true, problem_);
    created = memory != nullptr;
  }
  MPI_CHECK(MPI_Bcast(&created, 1, MPI_INT, 0, node_comm));
  if (local_rank != 0 && created) memory = map_segment(name, bytes, false, problem_);
  int all_mapped = memory != nullptr;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_mapped, 1, MPI_INT, MPI_MIN, node_comm));
  if (local_rank == 0 && created) shm_unlink(name);
  if (!all_mapped) {
    if (memory) munmap(memory, bytes);
    if (problem_.empty()) problem_ = "another rank on this node could not map it";
    problem_ = str("shared segment ", name, " (", bytes, " bytes): ", problem_);
    return;
  }
  memory_ = memory;
  bytes_ = bytes;
}

SharedSegment::~SharedSegment() {
  if (memory_) munmap(memory_, bytes_);
}

}  // namespace ringtrain::comm::shm
