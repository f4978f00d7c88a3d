// ring_allreduce.hpp — RingAllreduce: our bandwidth-optimal allreduce on MPI point-to-point.
//
// The n ranks stand in a ring (ordered so that neighbours share a node where they can) and
// the buffer is cut into n segments S0..S{n-1}. Ring position p sends to p+1 and receives
// from p-1, always at the same time. Example n = 4:
//
//            +------+        +------+
//            |  p0  | -----> |  p1  |
//            +------+        +------+
//               ^                |
//               |                v
//            +------+        +------+
//            |  p3  | <----- |  p2  |
//            +------+        +------+
//
// Phase 1, reduce-scatter: at step s, p sends S(p-s) and receives S(p-s-1), which it adds
// into its own copy. After n-1 steps p holds the complete sum of S(p+1).
//
//     step | p0 sends/adds | p1 sends/adds | p2 sends/adds | p3 sends/adds
//       0  |   S0 / S3     |   S1 / S0     |   S2 / S1     |   S3 / S2
//       1  |   S3 / S2     |   S0 / S3     |   S1 / S0     |   S2 / S1
//       2  |   S2 / S1     |   S3 / S2     |   S0 / S3     |   S1 / S0
//     owns |     S1        |     S2        |     S3        |     S0
//
// Phase 2, allgather: at step s, p sends S(p+1-s) and receives S(p-s), a complete segment
// that it copies over its own and forwards at the next step.
//
//     step | p0 sends/gets | p1 sends/gets | p2 sends/gets | p3 sends/gets
//       0  |   S1 / S0     |   S2 / S1     |   S3 / S2     |   S0 / S3
//       1  |   S0 / S3     |   S1 / S0     |   S2 / S1     |   S3 / S2
//       2  |   S3 / S2     |   S0 / S3     |   S1 / S0     |   S2 / S1
//
// Each rank sends and receives 2(n-1)/n of the buffer: the busbw of nccl-tests.
// Remainders: count = n*q + r; segments 0..r-1 hold q+1 elements, the others q (so with
// count < n some segments are empty). Every segment is cut into the same number C of
// chunks (segment i, chunk c = elements [len_i*c/C, len_i*(c+1)/C)), so one step is C
// messages; message m = s*C + c. Up to K = chunks_in_flight receives are posted ahead,
// and the send of message m+C leaves as soon as message m has been added in: receiving
// the next chunk, adding this one and sending the last one overlap, across steps too.
//
// Bitwise identity: every segment's final value is computed once, by its owner, and all
// other ranks receive those bytes. With a bf16/fp16 wire the owner rounds its own final
// segment to the wire format and back, so it holds exactly what the others receive.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/pipeline.hpp"
#include "ringtrain/comm/allreduce/scratch.hpp"
#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::shm {
class ShmRing;
class SharedBuckets;
}  // namespace ringtrain::comm::shm

namespace ringtrain::comm::allreduce {

class RingAllreduce final : public Allreducer {
 public:
  // Collective over comm (duplicated here). ring[i] is the comm rank at ring position i.
  // With options.shared_memory and every rank on this node, the messages of calls up to 512 KiB
  // go through a ShmRing (name() says "ring/shm"); the rest through MPI point-to-point.
  RingAllreduce(MPI_Comm comm, std::vector<int> ring, const AllreduceOptions& options);
  ~RingAllreduce() override;
  // In place; thread-safe in that concurrent calls on one instance are serialised.
  void sum(float* data, size_t count) override;
  // fp32 wire: the last reduce-scatter add divides as it sums (see Allreducer); narrow wires
  // sum, then divide.
  void sum_and_divide(float* data, size_t count, float divisor) override;
  std::string name() const override;
  void set_spin_hint(const std::atomic<bool>* hint) override;
  // Where ShmRing is up and the wire is fp32: the node's SharedBuckets; calls on data in
  // them are reduced in place from the peers' copies, at every size.
  std::shared_ptr<float> shared_buffers(size_t bytes) override;
  // True when a call on [data, data + count) goes through the shared buckets.
  bool in_shared_buffers(const float* data, size_t count) const;
  // Why the messages go through MPI although options.shared_memory asked for ShmRing ("" if
  // they do not, or it was not asked for).
  const std::string& no_shm_reason() const { return no_shm_reason_; }
  // Messages and shared-bucket stages completed, ever (Allreducer::progress).
  uint64_t progress() const override;
  // The phase of the call in progress, the neighbour it waits for and how far it got.
  std::string on_stall() override;

 private:
  enum class Phase { idle, reduce_scatter, allgather, shared };
  struct Layout;
  struct Span {
    size_t begin, len;
  };

  void reduce(float* data, size_t count, float divisor);
  void run_phase(float* data, const Layout& layout, bool reducing);
  void run_phase_shm(float* data, const Layout& layout, bool reducing);
  Span recv_span(const Layout& layout, bool reducing, int64_t m) const;
  Span send_span(const Layout& layout, bool reducing, int64_t m) const;
  void absorb(float* data, const Layout& layout, bool reducing, int64_t m, const void* in);
  void post_recv(float* data, const Layout& layout, bool reducing, int64_t m, MPI_Request* request);
  void finish_recv(float* data, const Layout& layout, bool reducing, int64_t m);
  void post_send(float* data, const Layout& layout, bool reducing, int64_t m, MPI_Request* request);
  void round_owned_segment(float* data, const Layout& layout);
  void ensure_scratch(size_t chunk_elems);

  CommHandle comm_;
  AllreduceOptions options_;
  int n_ = 1, rank_ = 0, pos_ = 0, left_ = 0, right_ = 0;
  std::mutex mutex_;
  // K receive slots (fp32 or wire elements) and, for a narrow wire, K send slots.
  ScratchBytes recv_scratch_, send_scratch_;
  size_t scratch_chunk_elems_ = 0;
  std::vector<MPI_Request> recv_requests_, send_requests_;
  std::unique_ptr<shm::ShmRing> shm_;  // null: messages go through MPI
  std::shared_ptr<shm::SharedBuckets>
      buckets_;  // the fusion buffers, where shared_buffers made them
  std::string no_shm_reason_;
  const std::atomic<bool>* spin_hint_ = nullptr;
  // The call in progress, for on_stall() and progress() on the watchdog's thread.
  std::atomic<Phase> phase_{Phase::idle};
  PipelineProgress progress_;
};

// Throws Error on every rank of comm, naming each rank's count, unless all pass the same
// count. Collective. what names the caller ("ring allreduce").
void check_same_count(MPI_Comm comm, size_t count, const std::string& what);

}  // namespace ringtrain::comm::allreduce
