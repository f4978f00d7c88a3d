// mpi_allreduce.hpp — MPI_Allreduce on a duplicate of the world: the reference every test and
// benchmark compares ours against.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

class MpiAllreduce final : public Allreducer {
 public:
  // Collective over comm (duplicated here). Sends fp32 only: options.wire is not read.
  MpiAllreduce(const Communicator& comm, const AllreduceOptions& options);
  void sum(float* data, size_t count) override;
  std::string name() const override { return "mpi"; }
  // MPI_Allreduce does not say whom it waits for: the report can only say where.
  std::string on_stall() override {
    return in_call_.load() ? "mpi waits inside MPI_Allreduce" : "";
  }

 private:
  CommHandle comm_;
  bool validate_;
  std::mutex mutex_;
  std::atomic<bool> in_call_{false};  // for on_stall(), on the watchdog's thread
};

}  // namespace ringtrain::comm::allreduce
