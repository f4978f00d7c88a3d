// auto_allreduce.cpp — the size and topology rule of auto and the allreducer that applies it per
// call.
#include "ringtrain/comm/allreduce/auto_allreduce.hpp"

#include <algorithm>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {
namespace {

// The topology of comm's ranks: real nodes, or groups of ranks_per_node consecutive ranks
// (the override tests and the deck's comm.ranks_per_node use), as HierarchicalAllreduce groups.
Topology topology_of(const Communicator& comm, int ranks_per_node) {
  const int n = comm.size();
  if (ranks_per_node > 0)
    return Topology{n, (n + ranks_per_node - 1) / ranks_per_node, std::min(n, ranks_per_node)};
  int most = comm.local_size();  // this rank's node's ranks; the most on any node:
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, comm.raw()));
  return Topology{n, comm.node_count(), most};
}

// auto's only way to hierarchical (see choose_automatic): across nodes of several ranks, on a
// world that is not a power of two.
bool may_run_hierarchical(const Topology& topology) {
  const int n = topology.world_size;
  return topology.nodes > 1 && topology.max_ranks_per_node > 1 && (n & (n - 1)) != 0;
}

}  // namespace

// Up to 32 KiB rhd's whole-vector doubling takes the fewest steps; on a power of two rhd is
// ahead or level up to 16 MiB; elsewhere its fold costs a whole vector more, so it pays only
// while steps, not bytes, cost. Past those sizes the ring's neighbour-only traffic maps onto a
// real network best. Measurements: docs/TUNING.md, "auto: ring, rhd or hierarchical".
//
// Across nodes with more than one rank on a node: on a power of two, rhd at every size. It
// numbers the ranks by node and halves nearest partner first, so its first steps, which move
// the most bytes, stay in the node and every rank carries an equal share across the network,
// with no serial node-local phases (measured ahead of hierarchical and the ring at 2 x 2, and
// of MPI_Allreduce from 16 MiB: docs/TUNING.md, "rhd across nodes"). Elsewhere the fold would
// send whole vectors across the network: hierarchical past 64 KiB, where bytes, not steps,
// cost (one flow a node, 2(m-1)/m of the vector for m nodes); below, rhd's log2(n) steps. One
// rank a node is the one-node rule's case: the nodes are the ranks.
Algorithm choose_automatic(size_t bytes, const Topology& topology) {
  const int world_size = topology.world_size;
  if (topology.nodes > 1 && topology.max_ranks_per_node > 1)
    return may_run_hierarchical(topology) && bytes > (64u << 10) ? Algorithm::hierarchical
                                                                 : Algorithm::rhd;
  const bool power_of_two = (world_size & (world_size - 1)) == 0;
  if (world_size <= 2) return bytes <= (32u << 10) ? Algorithm::rhd : Algorithm::ring;
  if (power_of_two) return bytes <= (16u << 20) ? Algorithm::rhd : Algorithm::ring;
  return bytes <= (64u << 10) ? Algorithm::rhd : Algorithm::ring;
}

AutoAllreduce::AutoAllreduce(const Communicator& comm, const AllreduceOptions& options)
    : comm_(duplicate(comm.raw())),
      options_(options),
      topology_(topology_of(comm, options.ranks_per_node)) {
  AllreduceOptions inner = options;
  inner.validate_counts = false;  // checked once, here
  ring_ = std::make_unique<RingAllreduce>(comm.raw(), comm.ring_order(), inner);
  rhd_ = std::make_unique<HalvingDoubling>(comm.raw(), inner, comm.ring_order());
  if (may_run_hierarchical(topology_))
    hierarchical_ = std::make_unique<HierarchicalAllreduce>(comm, inner);
}

Allreducer& AutoAllreduce::chosen_for(const float* data, size_t count) {
  // In the node's shared buckets the reduction reads its peers' copies in place: no message
  // at all, which no algorithm's messages beat (docs/TUNING.md, "Shared buckets").
  if (ring_->in_shared_buffers(data, count)) return *ring_;
  switch (choose_automatic(count * sizeof(float), topology_)) {
    case Algorithm::rhd:
      return *rhd_;
    case Algorithm::hierarchical:
      return *hierarchical_;
    default:
      return *ring_;
  }
}

void AutoAllreduce::sum_and_divide(float* data, size_t count, float divisor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.validate_counts) check_same_count(comm_.get(), count, "auto allreduce");
  // Every rank passes the same count and knows the same topology, so every rank picks the
  // same algorithm.
  Allreducer& chosen = chosen_for(data, count);
  running_.store(&chosen);
  struct Done {
    std::atomic<Allreducer*>& running;
    ~Done() { running.store(nullptr); }
  } done{running_};
  chosen.sum_and_divide(data, count, divisor);
}

uint64_t AutoAllreduce::progress() const {
  return ring_->progress() + rhd_->progress() + (hierarchical_ ? hierarchical_->progress() : 0);
}

std::string AutoAllreduce::on_stall() {
  Allreducer* running = running_.load();
  if (!running) return "";  // between calls: nothing to add
  const std::string inner = running->on_stall();
  // The inner report starts with the inner algorithm's name.
  return str(name(), " chose ", inner.empty() ? running->name() : inner);
}

void AutoAllreduce::set_spin_hint(const std::atomic<bool>* hint) {
  ring_->set_spin_hint(hint);
  if (hierarchical_) hierarchical_->set_spin_hint(hint);
}

std::string AutoAllreduce::name() const {
  return options_.wire == Wire::fp32 ? "auto" : "auto/" + to_string(options_.wire);
}

}  // namespace ringtrain::comm::allreduce
