// halving_doubling.hpp — HalvingDoubling: Rabenseifner's allreduce on MPI point-to-point.
//
// The ring needs 2(n-1) steps, each a wait for one neighbour; this needs 2*log2(n), each an
// exchange with one partner, for the same bytes on the wire (2(n-1)/n of the buffer per rank
// when n is a power of two). It wins where steps cost more than bytes: small and middling
// messages, and oversubscribed ranks that each wait to be scheduled. Example n = 4, the
// buffer cut into 4 blocks B0..B3; "a <-> b" is a pairwise exchange, both directions at once:
//
//   reduce-scatter (recursive halving)          allgather (recursive doubling)
//   step 0, distance 1   step 1, distance 2     step 0, distance 2   step 1, distance 1
//      r0 <-> r1            r0 <-> r2              r0 <-> r2            r0 <-> r1
//      r2 <-> r3            r1 <-> r3              r1 <-> r3            r2 <-> r3
//
//   rank | step 0 sends/adds | step 1 sends/adds | owns | step 0 sends/gets | step 1 sends/gets
//    r0  |  B2B3 / B0B1      |   B1 / B0         |  B0  |   B0 / B1         |  B0B1 / B2B3
//    r1  |  B0B1 / B2B3      |   B3 / B2         |  B2  |   B2 / B3         |  B2B3 / B0B1
//    r2  |  B2B3 / B0B1      |   B0 / B1         |  B1  |   B1 / B0         |  B0B1 / B2B3
//    r3  |  B0B1 / B2B3      |   B2 / B3         |  B3  |   B3 / B2         |  B2B3 / B0B1
//
// At halving step s (distance d = 1, 2, ..., p/2) rank v halves the block range it still
// reduces, keeps the half on v's side of bit d and sends the other half to v^d, which holds
// the same range; after log2(p) steps v owns the complete sum of one block. Doubling
// retraces the ranges in reverse: v and v^d swap what they own.
//
// Nearest partner first, in node order: the ranks are numbered by `order` (by node, then local
// rank: Communicator::ring_order), so the first steps, which move the most bytes (half, then a
// quarter of the vector), stay inside a node, and only the steps with d >= k, the ranks per
// node (a power of two), cross the network: each of a node's k ranks then sends 1/k of what
// the ring's one boundary rank sends, the same bytes through the node's adapter as the ring in
// log2(n) steps instead of 2(n-1). Farthest-first sent k times that: at 2 x 2 ranks half the
// vector crossed the link, twice what OpenMPI's Rabenseifner sends (docs/TUNING.md, "rhd
// across nodes").
//
// Non-power-of-two n: p = the largest power of two <= n and e = n - p extra ranks. First each
// even rank 2i < 2e sends its whole vector to rank 2i+1, which adds it in (fold); then the p
// remaining ranks (virtual rank i for 2i+1 < 2e, r-e for the others) run the above; last,
// rank 2i+1 sends the finished vector back to rank 2i (unfold). n = 3: r0 -> r1, r1 <-> r2
// halving and doubling, r1 -> r0.
//
// Small messages (count * 4 <= options.doubling_max_bytes): recursive doubling of the whole vector
// instead, log2(p) exchanges of everything (plus the fold), half the steps of the above.
//
// Remainders: count = p*q + r; blocks 0..r-1 hold q+1 elements, the others q. Every exchange
// goes as messages of at most chunk_bytes, up to chunks_in_flight received into scratch slots
// ahead of the add, so receiving, adding and sending overlap within a step.
//
// Bitwise identity: in the halving scheme each block's final sum is computed once, by its
// owner, and every other rank receives those bytes. In whole-vector doubling both partners
// compute a + b and b + a, which IEEE addition makes the same bits (elementwise, no
// reassociation); only NaN payloads may differ. With a bf16/fp16 wire: a rank rounds its own
// values to the wire format before it sends them (doubling), or rounds its finished block
// (halving), so every rank adds and holds exactly what the others see.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/pipeline.hpp"
#include "ringtrain/comm/allreduce/scratch.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

class HalvingDoubling final : public Allreducer {
 public:
  // Collective over comm (duplicated here). order: comm's ranks in the order the algorithm
  // numbers them (a permutation; empty: 0..n-1); positions, not ranks, in the text above.
  HalvingDoubling(MPI_Comm comm, const AllreduceOptions& options, std::vector<int> order = {});
  // In place; thread-safe in that concurrent calls on one instance are serialised.
  void sum(float* data, size_t count) override;
  std::string name() const override;

  // Messages completed, ever (Allreducer::progress).
  uint64_t progress() const override;
  // The partner this rank exchanges with and how far that exchange got.
  std::string on_stall() override;

 private:
  // What happens to received elements: added into the destination, or copied over it.
  enum class Into { add, copy };

  void halving_doubling(float* data, size_t count);
  void whole_vector_doubling(float* data, size_t count);
  // One pairwise exchange, chunked: send[0, send_len) to partner while receiving recv_len
  // elements from it into recv. send and recv must not overlap.
  void exchange(int partner, const float* send, size_t send_len, float* recv, size_t recv_len,
                Into into, int tag);
  int rank_at_virtual(int virtual_rank) const;  // comm rank of a virtual rank
  void ensure_scratch(size_t slot_elems, size_t copy_elems);

  CommHandle comm_;
  AllreduceOptions options_;
  std::vector<int> order_;  // position -> comm rank
  int n_ = 1, pos_ = 0;     // pos_: this rank's position in order_
  int p_ = 1, extra_ = 0;   // the power of two that takes part in the exchanges, n - p
  int vrank_ = -1;          // rank among those p; -1 for a folded-out rank
  size_t chunk_elems_ = 1;  // this call's (chunk_bytes_for)
  std::mutex mutex_;
  // K receive slots and, for a narrow wire, K send slots of slot_elems_ each; copy_ holds
  // the vector's own values for whole-vector doubling (sent while the sum lands in place).
  ScratchBytes recv_slots_, send_slots_, copy_;
  size_t slot_elems_ = 0, copy_elems_ = 0;
  std::vector<MPI_Request> recv_requests_, send_requests_;
  PipelineProgress progress_;     // the exchange in progress, for on_stall()
  std::atomic<int> partner_{-1};  // its partner; -1 between exchanges
};

}  // namespace ringtrain::comm::allreduce
