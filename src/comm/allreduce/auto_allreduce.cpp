// auto_allreduce.cpp — the size rule of auto and the allreducer that applies it per call.
#include "ringtrain/comm/allreduce/auto_allreduce.hpp"

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm::allreduce {

// Up to 32 KiB rhd's whole-vector doubling takes the fewest steps; on a power of two rhd is
// ahead or level up to 16 MiB; elsewhere its fold costs a whole vector more, so it pays only
// while steps, not bytes, cost. Past those sizes the ring's neighbour-only traffic maps onto a
// real network best. Measurements: docs/TUNING.md, "auto: ring or rhd".
Algorithm choose_automatic(size_t bytes, int world_size) {
  const bool power_of_two = (world_size & (world_size - 1)) == 0;
  if (world_size <= 2) return bytes <= (32u << 10) ? Algorithm::rhd : Algorithm::ring;
  if (power_of_two) return bytes <= (16u << 20) ? Algorithm::rhd : Algorithm::ring;
  return bytes <= (64u << 10) ? Algorithm::rhd : Algorithm::ring;
}

AutoAllreduce::AutoAllreduce(const Communicator& comm, const AllreduceOptions& options)
    : comm_(duplicate(comm.raw())), options_(options), n_(comm.size()) {
  AllreduceOptions inner = options;
  inner.validate_counts = false;  // checked once, here
  ring_ = std::make_unique<RingAllreduce>(comm.raw(), comm.ring_order(), inner);
  rhd_ = std::make_unique<HalvingDoubling>(comm.raw(), inner);
}

void AutoAllreduce::sum_and_divide(float* data, size_t count, float divisor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.validate_counts) check_same_count(comm_.get(), count, "auto allreduce");
  // Every rank passes the same count, so every rank picks the same algorithm.
  Allreducer& chosen = choose_automatic(count * sizeof(float), n_) == Algorithm::ring
                           ? static_cast<Allreducer&>(*ring_)
                           : static_cast<Allreducer&>(*rhd_);
  chosen.sum_and_divide(data, count, divisor);
}

std::string AutoAllreduce::name() const {
  return options_.wire == Wire::fp32 ? "auto" : "auto/" + to_string(options_.wire);
}

}  // namespace ringtrain::comm::allreduce
