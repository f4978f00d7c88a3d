// link_probe.cpp — one bidirectional exchange between ring neighbours.
#include "ringtrain/comm/link_probe.hpp"

#include <algorithm>
#include <climits>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

RingLinkProbe::RingLinkProbe(const Communicator& comm) : comm_(duplicate(comm.raw())) {
  const auto& ring = comm.ring_order();
  const int n = comm.size();
  const int pos = static_cast<int>(std::find(ring.begin(), ring.end(), comm.rank()) - ring.begin());
  left_ = ring[(pos + n - 1) % n];
  right_ = ring[(pos + 1) % n];
}

void RingLinkProbe::exchange(const void* send, void* recv, size_t bytes) {
  RT_CHECK(bytes <= static_cast<size_t>(INT_MAX), "link probe: ", bytes,
           " bytes is more than one MPI message carries");
  MPI_Request requests[2];
  const int n = static_cast<int>(bytes);
  MPI_CHECK(MPI_Irecv(recv, n, MPI_BYTE, left_, 403, comm_.get(), &requests[0]));
  MPI_CHECK(MPI_Isend(send, n, MPI_BYTE, right_, 403, comm_.get(), &requests[1]));
  MPI_CHECK(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE));
}

}  // namespace ringtrain::comm
