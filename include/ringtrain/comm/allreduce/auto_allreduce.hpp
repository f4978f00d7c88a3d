// auto_allreduce.hpp — per call, rhd or ring by message size and world size.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/halving_doubling.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

// What auto runs for one call of `bytes` (fp32) over world_size ranks: ring or rhd. The rule
// and the measurements behind it: docs/TUNING.md, "auto: ring or rhd".
Algorithm choose_automatic(size_t bytes, int world_size);

class AutoAllreduce final : public Allreducer {
 public:
  // Collective over comm (duplicated here, and by the ring and rhd inside).
  AutoAllreduce(const Communicator& comm, const AllreduceOptions& options);
  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }
  void sum_and_divide(float* data, size_t count, float divisor) override;
  std::string name() const override;
  void set_spin_hint(const std::atomic<bool>* hint) override { ring_->set_spin_hint(hint); }

 private:
  CommHandle comm_;
  AllreduceOptions options_;
  int n_;
  std::unique_ptr<RingAllreduce> ring_;
  std::unique_ptr<HalvingDoubling> rhd_;
  std::mutex mutex_;
};

}  // namespace ringtrain::comm::allreduce
