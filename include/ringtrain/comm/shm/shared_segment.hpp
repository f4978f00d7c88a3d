// shared_segment.hpp — one POSIX shared-memory segment mapped by every rank of a node.
#pragma once

#include <cstddef>
#include <string>

#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm, CommHandle

namespace ringtrain::comm::shm {

// Collective over node_comm (ranks that share memory: MPI_Comm_split_type SHARED). Local rank 0
// creates the zero-filled segment under a name unique to its process, `what` and a counter;
// the others open it; once every rank has it mapped (or failed) the name is removed, so nothing
// is left in /dev/shm however the job ends. If any rank cannot map it, no rank keeps it:
// data() is null everywhere and problem() says why (on the failing rank: the errno text).
// Collective over comm: the communicator of its ranks on this node when that is all of comm (so
// local ranks are comm ranks), else an invalid handle, with why_not saying so.
CommHandle whole_comm_on_this_node(MPI_Comm comm, std::string& why_not);

class SharedSegment {
 public:
  SharedSegment(MPI_Comm node_comm, size_t bytes, const char* what);
  ~SharedSegment();  // unmaps; not collective, so it is safe on any unwinding path
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  void* data() const { return memory_; }
  size_t bytes() const { return bytes_; }
  const std::string& problem() const { return problem_; }

 private:
  void* memory_ = nullptr;
  size_t bytes_ = 0;
  std::string problem_;
};

}  // namespace ringtrain::comm::shm
