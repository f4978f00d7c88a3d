// ring_allreduce.cpp — the pipelined ring (see the diagram in ring_allreduce.hpp) and its kernels.
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/comm/allreduce/pipeline.hpp"
#include "ringtrain/comm/shm/shared_buckets.hpp"
#include "ringtrain/comm/shm/shm_ring.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/fault.hpp"

namespace ringtrain::comm::allreduce {
namespace {

constexpr int kTagReduceScatter = 401;
constexpr int kTagAllgather = 402;
// RINGTRAIN_DROP_MESSAGE (core/fault.hpp): a message sent where no receive will ever match it,
// as a message lost on the way would be.
constexpr int kTagLost = 409;
// ShmRing: a message is at most one slot. 256 KiB: the chunk that measured best past the
// last-level cache (docs/TUNING.md), and K of them per rank stay a small segment.
constexpr size_t kShmSlotBytes = 256 << 10;
constexpr int kShmMaxSlots = 4;
// Larger calls go through MPI even where ShmRing is up. ShmRing moves every byte twice (into
// the neighbour's slot, out of it) where OpenMPI's single-copy CMA moves it once; its gain is
// waits without polling and with less latency, which wins up to 512 KiB (docs/TUNING.md, "The
// ring over shared memory").
constexpr size_t kShmMaxBytes = 512 << 10;

// The largest power of two <= min(chunks_in_flight, kShmMaxSlots): ShmRing wants a power of
// two, and a rank that alternates send and receive never runs more than a few messages ahead.
int shm_slots(int chunks_in_flight) {
  int slots = 1;
  while (slots * 2 <= std::min(chunks_in_flight, kShmMaxSlots)) slots *= 2;
  return slots;
}

int ring_mod(int64_t a, int n) {
  return static_cast<int>(((a % n) + n) % n);
}

}  // namespace

// Where segment i and its chunk c live in the caller's buffer (see the header's remainders).
struct RingAllreduce::Layout {
  Layout(size_t count, int n, size_t max_chunk_elems, float divisor)
      : n(n), q(count / n), r(count % n), divisor(divisor) {
    const size_t longest = q + (r > 0 ? 1 : 0);
    chunks = static_cast<int64_t>(
        std::max<size_t>(1, (longest + max_chunk_elems - 1) / max_chunk_elems));
    chunk_elems = (longest + chunks - 1) / chunks;
  }
  size_t seg_offset(int i) const { return i * q + std::min<size_t>(i, r); }
  size_t seg_len(int i) const { return q + (static_cast<size_t>(i) < r ? 1 : 0); }
  size_t chunk_begin(int seg, int64_t c) const {
    return seg_offset(seg) + seg_len(seg) * c / chunks;
  }
  size_t chunk_len(int seg, int64_t c) const {
    return seg_len(seg) * (c + 1) / chunks - seg_len(seg) * c / chunks;
  }

  int n;
  size_t q, r;
  int64_t chunks;      // C: messages per ring step
  size_t chunk_elems;  // the longest chunk of this call
  float divisor;       // the owned segment's last add divides by this (1: a plain sum)
};

RingAllreduce::RingAllreduce(MPI_Comm comm, std::vector<int> ring, const AllreduceOptions& options)
    : comm_(duplicate(comm)), options_(options) {
  check_pipeline_options(options);
  MPI_CHECK(MPI_Comm_size(comm_.get(), &n_));
  MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_));
  pos_ = position_in_order(ring, n_, rank_, "ring");
  left_ = ring[ring_mod(pos_ - 1, n_)];
  right_ = ring[ring_mod(pos_ + 1, n_)];
  if (options_.shared_memory && n_ > 1)
    shm_ = shm::ShmRing::try_make(comm_.get(), right_, shm_slots(options_.chunks_in_flight),
                                  kShmSlotBytes, no_shm_reason_);
}

RingAllreduce::~RingAllreduce() = default;

void RingAllreduce::set_spin_hint(const std::atomic<bool>* hint) {
  spin_hint_ = hint;
  if (shm_) shm_->set_spin_hint(hint);
  if (buckets_) buckets_->set_spin_hint(hint);
}

std::shared_ptr<float> RingAllreduce::shared_buffers(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Every rank has ShmRing or none has (try_make agrees), and the same options and call order.
  if (!shm_ || options_.wire != Wire::fp32 || buckets_) return nullptr;
  std::string why_not;
  buckets_ = shm::SharedBuckets::try_make(comm_.get(), bytes, why_not);
  if (!buckets_) return nullptr;
  buckets_->set_spin_hint(spin_hint_);
  // The memory lives as long as the buckets, which this pointer shares.
  return std::shared_ptr<float>(buckets_, buckets_->mine());
}

bool RingAllreduce::in_shared_buffers(const float* data, size_t count) const {
  return buckets_ && buckets_->holds(data, count);
}

std::string RingAllreduce::name() const {
  const std::string ring = shm_ ? "ring/shm" : "ring";
  return options_.wire == Wire::fp32 ? ring : ring + "/" + to_string(options_.wire);
}

uint64_t RingAllreduce::progress() const {
  const uint64_t stages = buckets_ ? buckets_->stages_done() : 0;
  return progress_.completed.load(std::memory_order_relaxed) + stages;
}

std::string RingAllreduce::on_stall() {
  const Phase phase = phase_.load(std::memory_order_relaxed);
  if (phase == Phase::idle) return "";  // between calls: nothing to add
  if (phase == Phase::shared) return name() + " " + buckets_->describe_wait();
  // Receives come from the left, sends go to the right: once every receive is in, only a send
  // is outstanding.
  const bool received_all = progress_.recvs_done.load(std::memory_order_relaxed) >=
                            progress_.recvs.load(std::memory_order_relaxed);
  return str(name(), " waits for rank ", received_all ? right_ : left_, " in the ",
             phase == Phase::reduce_scatter ? "reduce-scatter" : "allgather", " (",
             wait_text(progress_, left_, right_), ")");
}

void RingAllreduce::sum(float* data, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  reduce(data, count, 1.0f);
}

void RingAllreduce::sum_and_divide(float* data, size_t count, float divisor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.wire == Wire::fp32 && n_ > 1) return reduce(data, count, divisor);
  // A narrow wire rounds the owned segment after the reduce-scatter: dividing before that
  // would change what goes on the wire, so the division stays a pass of its own.
  reduce(data, count, 1.0f);
  if (divisor != 1.0f) divide_floats(data, count, divisor);
}

void RingAllreduce::reduce(float* data, size_t count, float divisor) {
  if (options_.validate_counts) check_same_count(comm_.get(), count, "ring allreduce");
  if (count == 0 || n_ == 1) return;
  // Idle again however the call ends (an error, or the stall watchdog's report).
  struct Idle {
    std::atomic<Phase>& phase;
    ~Idle() { phase.store(Phase::idle, std::memory_order_relaxed); }
  } idle{phase_};
  // The same on every rank: the engine's buckets are at one offset of every rank's region.
  if (in_shared_buffers(data, count)) {
    phase_.store(Phase::shared, std::memory_order_relaxed);
    return buckets_->allreduce(data, count, divisor);
  }
  const size_t chunk_bytes = chunk_bytes_for(options_.chunk_bytes, count * sizeof(float));
  const bool via_shm = shm_ && count * sizeof(float) <= kShmMaxBytes;
  size_t max_chunk_elems = std::max<size_t>(1, chunk_bytes / sizeof(float));
  if (via_shm)
    max_chunk_elems = std::min(max_chunk_elems, shm_->slot_bytes() / wire_bytes(options_.wire));
  const Layout layout(count, n_, max_chunk_elems, divisor);
  if (!via_shm) ensure_scratch(layout.chunk_elems);
  for (const bool reducing : {true, false}) {
    phase_.store(reducing ? Phase::reduce_scatter : Phase::allgather, std::memory_order_relaxed);
    if (!reducing && options_.wire != Wire::fp32) round_owned_segment(data, layout);
    if (via_shm)
      run_phase_shm(data, layout, reducing);
    else
      run_phase(data, layout, reducing);
  }
}

// The (n-1)*C messages of one phase through ShmRing, each rank alternating send m, receive m
// (deadlock-free, see shm_ring.hpp). Message m forwards what message m-C brought in, which the
// alternation has already taken in. The sender copies (or encodes) into the neighbour's slot;
// the receiver adds (or copies) out of its own.
void RingAllreduce::run_phase_shm(float* data, const Layout& layout, bool reducing) {
  const int64_t M = (n_ - 1) * layout.chunks;
  progress_.recvs.store(M, std::memory_order_relaxed);
  progress_.sends.store(M, std::memory_order_relaxed);
  for (int64_t m = 0; m < M; ++m) {
    progress_.recvs_done.store(m, std::memory_order_relaxed);
    progress_.sends_done.store(m, std::memory_order_relaxed);
    const Span out = send_span(layout, reducing, m);
    void* slot = shm_->claim_send_slot();
    if (options_.wire == Wire::fp32)
      std::memcpy(slot, data + out.begin, out.len * sizeof(float));
    else
      encode_wire(options_.wire, static_cast<uint16_t*>(slot), data + out.begin, out.len);
    shm_->send_claimed();
    progress_.sends_done.store(m + 1, std::memory_order_relaxed);
    progress_.completed.fetch_add(1, std::memory_order_relaxed);
    absorb(data, layout, reducing, m, shm_->wait_message());
    shm_->release_message();
    progress_.recvs_done.store(m + 1, std::memory_order_relaxed);
    progress_.completed.fetch_add(1, std::memory_order_relaxed);
  }
}

// The (n-1)*C messages of one phase through run_pipeline (pipeline.hpp).
// Windows: a message that needs a scratch slot (any receive that is added in, any send on a
// narrow wire) waits for one of the K slots. With post_all_ready, fp32 sends and fp32
// allgather receives (straight into the caller's buffer) need none and are all posted as soon
// as they may go, so a neighbour can pull them (single-copy CMA) even while this rank is
// descheduled on a loaded machine.
void RingAllreduce::run_phase(float* data, const Layout& layout, bool reducing) {
  const int64_t C = layout.chunks, M = (n_ - 1) * C, K = options_.chunks_in_flight;
  const bool fp32 = options_.wire == Wire::fp32, unbounded = options_.post_all_ready && fp32;
  const int64_t ahead = posted_ahead(M, K);
  PipelineShape shape;
  shape.recvs = shape.sends = M;
  shape.recv_window = unbounded && !reducing ? ahead : K;
  shape.send_window = unbounded ? ahead : K;
  run_pipeline(
      shape, recv_requests_, send_requests_,
      [&](int64_t m, MPI_Request* request) { post_recv(data, layout, reducing, m, request); },
      [&](int64_t m, MPI_Request* request) { post_send(data, layout, reducing, m, request); },
      [&](int64_t m) { finish_recv(data, layout, reducing, m); },
      // Message m forwards what message m-C brought in, so it waits until that one is done.
      [C](int64_t m, int64_t receives_done) { return m < C || m - C < receives_done; }, &progress_);
}

// Message m of a phase: the chunk this rank receives (reduce-scatter: adds in; allgather:
// takes over) and the chunk it sends.
RingAllreduce::Span RingAllreduce::recv_span(const Layout& layout, bool reducing, int64_t m) const {
  const int64_t step = m / layout.chunks, c = m % layout.chunks;
  const int seg = reducing ? ring_mod(pos_ - step - 1, n_) : ring_mod(pos_ - step, n_);
  return {layout.chunk_begin(seg, c), layout.chunk_len(seg, c)};
}

RingAllreduce::Span RingAllreduce::send_span(const Layout& layout, bool reducing, int64_t m) const {
  const int64_t step = m / layout.chunks, c = m % layout.chunks;
  const int seg = reducing ? ring_mod(pos_ - step, n_) : ring_mod(pos_ + 1 - step, n_);
  return {layout.chunk_begin(seg, c), layout.chunk_len(seg, c)};
}

void RingAllreduce::post_recv(float* data, const Layout& layout, bool reducing, int64_t m,
                              MPI_Request* request) {
  const auto [begin, len] = recv_span(layout, reducing, m);
  const int slot = static_cast<int>(m % options_.chunks_in_flight);
  const int tag = reducing ? kTagReduceScatter : kTagAllgather;
  if (options_.wire == Wire::fp32) {
    float* into = reducing
                      ? reinterpret_cast<float*>(recv_scratch_.get()) + slot * scratch_chunk_elems_
                      : data + begin;  // allgather lands in place
    MPI_CHECK(MPI_Irecv(into, static_cast<int>(len), MPI_FLOAT, left_, tag, comm_.get(), request));
  } else {
    uint16_t* into = reinterpret_cast<uint16_t*>(recv_scratch_.get()) + slot * scratch_chunk_elems_;
    MPI_CHECK(
        MPI_Irecv(into, static_cast<int>(len), MPI_UINT16_T, left_, tag, comm_.get(), request));
  }
}

void RingAllreduce::finish_recv(float* data, const Layout& layout, bool reducing, int64_t m) {
  const size_t slot = static_cast<size_t>(m % options_.chunks_in_flight);
  const bool in_place = options_.wire == Wire::fp32 && !reducing;  // see post_recv
  const unsigned char* in =
      in_place ? nullptr
               : recv_scratch_.get() + slot * scratch_chunk_elems_ * wire_bytes(options_.wire);
  absorb(data, layout, reducing, m, in);
}

// Takes received message m in: adds it (reduce-scatter) or copies it over (allgather) at its
// place in data, decoding a narrow wire. in = nullptr: it already landed in place.
void RingAllreduce::absorb(float* data, const Layout& layout, bool reducing, int64_t m,
                           const void* in) {
  if (!in) return;
  const auto [begin, len] = recv_span(layout, reducing, m);
  const Wire wire = options_.wire;
  if (wire == Wire::fp32) {
    const float* from = static_cast<const float*>(in);
    if (!reducing) {
      std::memcpy(data + begin, from, len * sizeof(float));
      return;
    }
    // The last step's add completes the owned segment: the division rides along with it.
    if (m / layout.chunks == n_ - 2 && layout.divisor != 1.0f)
      add_divide_floats(data + begin, from, len, layout.divisor);
    else
      add_floats(data + begin, from, len);
    return;
  }
  const uint16_t* from = static_cast<const uint16_t*>(in);
  if (reducing)
    decode_add_wire(wire, data + begin, from, len);
  else
    decode_wire(wire, data + begin, from, len);
}

void RingAllreduce::post_send(float* data, const Layout& layout, bool reducing, int64_t m,
                              MPI_Request* request) {
  const auto [begin, len] = send_span(layout, reducing, m);
  const size_t slot = static_cast<size_t>(m % options_.chunks_in_flight);
  const int tag = drop_message_fault(rank_) ? kTagLost
                  : reducing                ? kTagReduceScatter
                                            : kTagAllgather;
  if (options_.wire == Wire::fp32) {
    MPI_CHECK(MPI_Isend(data + begin, static_cast<int>(len), MPI_FLOAT, right_, tag, comm_.get(),
                        request));
  } else {
    uint16_t* wire = reinterpret_cast<uint16_t*>(send_scratch_.get()) + slot * scratch_chunk_elems_;
    encode_wire(options_.wire, wire, data + begin, len);
    MPI_CHECK(
        MPI_Isend(wire, static_cast<int>(len), MPI_UINT16_T, right_, tag, comm_.get(), request));
  }
}

// The owner's final segment goes through the wire format too, so every rank holds the
// bytes the allgather delivers.
void RingAllreduce::round_owned_segment(float* data, const Layout& layout) {
  const int owned = ring_mod(pos_ + 1, n_);
  round_through_wire(options_.wire, data + layout.seg_offset(owned), layout.seg_len(owned));
}

// Scratch grows to the longest chunk any call has needed, never per call.
void RingAllreduce::ensure_scratch(size_t chunk_elems) {
  if (chunk_elems <= scratch_chunk_elems_) return;
  const size_t slots = static_cast<size_t>(options_.chunks_in_flight);
  recv_scratch_ = allocate_scratch(slots * chunk_elems * wire_bytes(options_.wire));
  if (options_.wire != Wire::fp32) send_scratch_ = allocate_scratch(slots * chunk_elems * 2);
  scratch_chunk_elems_ = chunk_elems;
}

void check_same_count(MPI_Comm comm, size_t count, const std::string& what) {
  long long range[2] = {static_cast<long long>(count), -static_cast<long long>(count)};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, comm));
  if (range[0] == -range[1]) return;
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<long long> counts(size);
  long long mine = static_cast<long long>(count);
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_LONG_LONG, counts.data(), 1, MPI_LONG_LONG, comm));
  std::string listing;
  for (int r = 0; r < size; ++r) listing += str(r == 0 ? "" : ", ", "rank ", r, ": ", counts[r]);
  throw Error(str(what, ": ranks passed different element counts (", listing,
                  "); every rank must pass the same count"));
}

}  // namespace ringtrain::comm::allreduce
