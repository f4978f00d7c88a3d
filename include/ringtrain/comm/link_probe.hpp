// link_probe.hpp — RingLinkProbe: the point-to-point bandwidth of one ring link, for benchmarks.
//
// Every rank sends a message to its ring successor while receiving one of the same size from
// its predecessor — the pattern of every ring step — as one MPI_Isend/MPI_Irecv pair. The
// bytes per second one rank moves this way bound the ring's busbw from above.
#pragma once

#include <cstddef>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm {

class RingLinkProbe {
 public:
  explicit RingLinkProbe(const Communicator& comm);  // collective
  // Collective: sends bytes from send to the successor, receives bytes into recv.
  void exchange(const void* send, void* recv, size_t bytes);

 private:
  CommHandle comm_;
  int left_ = 0, right_ = 0;
};

}  // namespace ringtrain::comm
