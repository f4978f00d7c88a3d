// mpi_allreduce.cpp — MPI_Allreduce in place, in pieces MPI's int counts can carry.
#include "ringtrain/comm/allreduce/mpi_allreduce.hpp"

#include <algorithm>

#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm::allreduce {

MpiAllreduce::MpiAllreduce(const Communicator& comm, const AllreduceOptions& options)
    : comm_(duplicate(comm.raw())), validate_(options.validate_counts) {}

void MpiAllreduce::sum(float* data, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_call_.store(true);
  struct Leave {
    std::atomic<bool>& in_call;
    ~Leave() { in_call.store(false); }
  } leave{in_call_};
  if (validate_) check_same_count(comm_.get(), count, "mpi allreduce");
  for (size_t done = 0; done < count; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min(kMaxMpiPiece, count - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, piece, MPI_FLOAT, MPI_SUM, comm_.get()));
  }
}

}  // namespace ringtrain::comm::allreduce
