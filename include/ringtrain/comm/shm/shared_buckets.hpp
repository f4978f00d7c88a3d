// shared_buckets.hpp — SharedBuckets: every rank's fusion buffers in one node segment, reduced
// by each rank reading its peers' buffers in place (one copy out, not two through slots).
//
// Why: the ring over shared memory (ShmRing) moves every byte twice, into the neighbour's slot
// and out of it, and past 512 KiB the ring goes through MPI point-to-point, where OpenMPI's
// single-copy (CMA) path moves it once: ours fell behind MPI_Allreduce from 1 to 8 MiB
// (docs/TUNING.md). Here the buffers the gradients are written into already live in memory
// every rank of the node maps, so no rank sends anything:
//
//   arrive     rank r publishes arrived[r] = call: its buffer holds this call's data
//   reduce     rank r sums part r of the vector over every rank's buffer, in rank order,
//              divides, and writes it into part r of its own buffer; reduced[r] = call
//   gather     rank r copies part j from rank j's buffer, for every j != r; done[r] = call
//   leave      rank r waits until done[j] = call for every j: nobody reads its buffer any more
//
// Each rank reads the whole vector once and writes its own buffer once: a third less memory
// traffic than ShmRing for 2 ranks, and 3 waits a call instead of 2(n-1) x chunks.
// Part r is only ever written by rank r (in its buffer) and read by the others after
// reduced[r]; a rank writes part j of its own buffer (gather) only after rank j published
// reduced[j], by which time rank j has finished reading every buffer. Each part's value is
// computed once, by its owner, so every rank ends with the same bits.
//
// Layout: a control block (per rank three counters, each on its own cache line), then one
// region a rank, each a whole number of pages. The calls' counters go up by one per call on
// every rank; they are compared modulo 2^32 (futex.hpp's `reached`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm
#include "ringtrain/comm/shm/wait_style.hpp"

namespace ringtrain::comm::shm {

class SharedSegment;

class SharedBuckets {
 public:
  // Collective over comm. Null, with why_not set, unless every rank of comm is on this node
  // and the segment maps on all of them (the same answer on every rank). Each rank's region
  // holds `bytes` (rounded up to a page).
  static std::shared_ptr<SharedBuckets> try_make(MPI_Comm comm, size_t bytes, std::string& why_not);
  ~SharedBuckets();
  SharedBuckets(const SharedBuckets&) = delete;
  SharedBuckets& operator=(const SharedBuckets&) = delete;

  float* mine() const { return region(rank_); }
  size_t bytes() const { return region_bytes_; }
  // True when [data, data + count) lies in this rank's region.
  bool holds(const float* data, size_t count) const;
  // Sum over every rank of [data, data + count), divided by divisor, in place on every rank.
  // data must be at the same offset of each rank's region on every rank (the fusion engine's
  // buckets are). Not thread-safe: one call at a time per instance (the caller's lock).
  void allreduce(float* data, size_t count, float divisor);
  void set_spin_hint(const std::atomic<bool>* hint) { spin_hint_ = hint; }
  // How its waits pass the time (wait_style.hpp): chosen at try_make, the same on every rank.
  WaitStyle wait_style() const { return wait_style_; }
  // This rank's stages (arrive, reduce, leave) published so far: moves while the calls move.
  // Safe on any thread, as is describe_wait().
  uint64_t stages_done() const;
  // For a stall report: which peers the call in progress waits for, and at which stage
  // ("waits in the node's shared buckets for rank 1 to arrive (call 7)").
  std::string describe_wait() const;

 private:
  struct Counters;
  SharedBuckets(std::unique_ptr<SharedSegment> segment, int rank, int size, size_t region_bytes,
                WaitStyle wait_style);
  float* region(int rank) const;
  Counters& counters(int rank) const;
  void reduce_part(size_t offset, size_t begin, size_t end, float divisor);
  void wait_all(std::atomic<uint32_t> Counters::*word, uint32_t want) const;

  std::unique_ptr<SharedSegment> segment_;
  int rank_ = 0, size_ = 1;
  size_t control_bytes_ = 0, region_bytes_ = 0;
  std::atomic<uint32_t> calls_{0};  // written by the caller's thread, read by describe_wait()
  const std::atomic<bool>* spin_hint_ = nullptr;
  WaitStyle wait_style_ = WaitStyle::spin;
};

}  // namespace ringtrain::comm::shm
