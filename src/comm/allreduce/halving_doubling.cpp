// halving_doubling.cpp — recursive halving-doubling and whole-vector doubling (see the header).
#include "ringtrain/comm/allreduce/halving_doubling.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/comm/allreduce/pipeline.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {
namespace {

constexpr int kTagFold = 411;
constexpr int kTagHalving = 412;
constexpr int kTagDoubling = 413;
constexpr int kTagWholeVector = 414;
constexpr int kTagUnfold = 415;

// Block i of p over count elements (the header's remainders): [offset(i), offset(i+1)).
size_t block_offset(size_t count, int p, int i) {
  const size_t q = count / p, r = count % p;
  return i * q + std::min<size_t>(i, r);
}

// Messages of a len-element transfer: each side computes the same cut from len alone.
int64_t chunks_of(size_t len, size_t chunk_elems) {
  return len == 0 ? 0 : static_cast<int64_t>((len + chunk_elems - 1) / chunk_elems);
}
size_t chunk_begin(size_t len, int64_t chunks, int64_t c) {
  return len * c / chunks;
}

}  // namespace

HalvingDoubling::HalvingDoubling(MPI_Comm comm, const AllreduceOptions& options,
                                 std::vector<int> order)
    : comm_(duplicate(comm)), options_(options), order_(std::move(order)) {
  check_pipeline_options(options);
  int rank = 0;
  MPI_CHECK(MPI_Comm_size(comm_.get(), &n_));
  MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank));
  if (order_.empty())
    for (int r = 0; r < n_; ++r) order_.push_back(r);
  pos_ = position_in_order(order_, n_, rank, "rhd");
  while (p_ * 2 <= n_) p_ *= 2;
  extra_ = n_ - p_;
  // Positions below 2e pair up: the even one folds into the odd one, which takes part.
  if (pos_ < 2 * extra_)
    vrank_ = pos_ % 2 == 1 ? pos_ / 2 : -1;
  else
    vrank_ = pos_ - extra_;
}

int HalvingDoubling::rank_at_virtual(int virtual_rank) const {
  return order_[virtual_rank < extra_ ? 2 * virtual_rank + 1 : virtual_rank + extra_];
}

std::string HalvingDoubling::name() const {
  return options_.wire == Wire::fp32 ? "rhd" : "rhd/" + to_string(options_.wire);
}

void HalvingDoubling::sum(float* data, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.validate_counts) check_same_count(comm_.get(), count, "rhd allreduce");
  if (count == 0 || n_ == 1) return;
  const bool whole = count * sizeof(float) <= options_.doubling_max_bytes;
  chunk_elems_ = std::max<size_t>(
      1, chunk_bytes_for(options_.chunk_bytes, count * sizeof(float)) / sizeof(float));
  ensure_scratch(std::min(chunk_elems_, count), whole ? count : 0);
  if (pos_ < 2 * extra_) {
    if (vrank_ < 0)
      exchange(order_[pos_ + 1], data, count, nullptr, 0, Into::add, kTagFold);
    else
      exchange(order_[pos_ - 1], nullptr, 0, data, count, Into::add, kTagFold);
  }
  if (vrank_ >= 0) {
    if (whole)
      whole_vector_doubling(data, count);
    else
      halving_doubling(data, count);
  }
  // Every value the unfold sends is already wire-exact, so the folded rank gets the same bytes.
  if (pos_ < 2 * extra_) {
    if (vrank_ < 0)
      exchange(order_[pos_ + 1], nullptr, 0, data, count, Into::copy, kTagUnfold);
    else
      exchange(order_[pos_ - 1], data, count, nullptr, 0, Into::copy, kTagUnfold);
  }
}

// Halving: the blocks [lo, lo + size) this rank still reduces halve each step, nearest partner
// first; it keeps the half on its side of bit d. Doubling: what it holds complete grows back
// through the same ranges, farthest partner first. A range of `size` blocks starts at a
// multiple of size, so the partner's half (halving) or range (doubling) starts at lo ^ size.
void HalvingDoubling::halving_doubling(float* data, size_t count) {
  const auto begin = [&](int block) { return block_offset(count, p_, block); };
  const auto length = [&](int block, int blocks) { return begin(block + blocks) - begin(block); };
  int lo = 0, size = p_;
  for (int d = 1; d < p_; d *= 2) {
    size /= 2;
    if ((vrank_ & d) != 0) lo += size;
    const int theirs = lo ^ size;
    exchange(rank_at_virtual(vrank_ ^ d), data + begin(theirs), length(theirs, size),
             data + begin(lo), length(lo, size), Into::add, kTagHalving);
  }
  // This rank's block is final: with a narrow wire it holds what the others will decode.
  if (options_.wire != Wire::fp32)
    round_through_wire(options_.wire, data + begin(lo), length(lo, 1));
  for (int d = p_ / 2; d >= 1; d /= 2) {
    const int theirs = lo ^ size;
    exchange(rank_at_virtual(vrank_ ^ d), data + begin(lo), length(lo, size), data + begin(theirs),
             length(theirs, size), Into::copy, kTagDoubling);
    lo &= ~size;
    size *= 2;
  }
}

// Each step swaps the whole partial sum with the partner and adds: a copy of this rank's
// values is what goes out, so the sum can land in place while the send is in flight.
void HalvingDoubling::whole_vector_doubling(float* data, size_t count) {
  float* own = reinterpret_cast<float*>(copy_.get());
  for (int d = 1; d < p_; d *= 2) {
    // Round first so that both partners add the same two wire-exact values.
    if (options_.wire != Wire::fp32) round_through_wire(options_.wire, data, count);
    std::memcpy(own, data, count * sizeof(float));
    exchange(rank_at_virtual(vrank_ ^ d), own, count, data, count, Into::add, kTagWholeVector);
  }
  // The unfold sends this vector on the wire: make it wire-exact on every rank alike.
  if (options_.wire != Wire::fp32) round_through_wire(options_.wire, data, count);
}

// One partner's chunks through the ring's event loop (run_pipeline). fp32 sends and fp32
// copies need no scratch and are all posted at once (the partner can pull them by single-copy
// CMA while this rank is descheduled); a receive that is added in, or anything on a narrow
// wire, takes one of K scratch slots.
void HalvingDoubling::exchange(int partner, const float* send, size_t send_len, float* recv,
                               size_t recv_len, Into into, int tag) {
  const Wire wire = options_.wire;
  const bool fp32 = wire == Wire::fp32;
  const int64_t K = options_.chunks_in_flight;
  const int64_t SC = chunks_of(send_len, chunk_elems_), RC = chunks_of(recv_len, chunk_elems_);
  PipelineShape shape;  // run_pipeline keeps every window at 1 or more
  shape.recvs = RC;
  shape.sends = SC;
  shape.send_window = fp32 ? posted_ahead(SC, K) : K;
  shape.recv_window = fp32 && into == Into::copy ? posted_ahead(RC, K) : K;
  auto slot = [&](const ScratchBytes& slots, int64_t m, size_t elem_bytes) {
    return slots.get() + static_cast<size_t>(m % K) * slot_elems_ * elem_bytes;
  };
  const MPI_Datatype wire_type = fp32 ? MPI_FLOAT : MPI_UINT16_T;
  auto post_recv = [&](int64_t m, MPI_Request* request) {
    const size_t b = chunk_begin(recv_len, RC, m);
    const int len = static_cast<int>(chunk_begin(recv_len, RC, m + 1) - b);
    void* into_ptr = fp32 && into == Into::copy ? static_cast<void*>(recv + b)
                                                : slot(recv_slots_, m, wire_bytes(wire));
    MPI_CHECK(MPI_Irecv(into_ptr, len, wire_type, partner, tag, comm_.get(), request));
  };
  auto post_send = [&](int64_t m, MPI_Request* request) {
    const size_t b = chunk_begin(send_len, SC, m);
    const size_t len = chunk_begin(send_len, SC, m + 1) - b;
    const void* from = send + b;
    if (!fp32) {
      uint16_t* encoded = reinterpret_cast<uint16_t*>(slot(send_slots_, m, 2));
      encode_wire(wire, encoded, send + b, len);
      from = encoded;
    }
    MPI_CHECK(
        MPI_Isend(from, static_cast<int>(len), wire_type, partner, tag, comm_.get(), request));
  };
  auto finish_recv = [&](int64_t m) {
    const size_t b = chunk_begin(recv_len, RC, m);
    const size_t len = chunk_begin(recv_len, RC, m + 1) - b;
    const unsigned char* got = slot(recv_slots_, m, wire_bytes(wire));
    if (fp32 && into == Into::add)
      add_floats(recv + b, reinterpret_cast<const float*>(got), len);
    else if (!fp32 && into == Into::add)
      decode_add_wire(wire, recv + b, reinterpret_cast<const uint16_t*>(got), len);
    else if (!fp32)
      decode_wire(wire, recv + b, reinterpret_cast<const uint16_t*>(got), len);
  };
  partner_.store(partner, std::memory_order_relaxed);
  run_pipeline(
      shape, recv_requests_, send_requests_, post_recv, post_send, finish_recv,
      [](int64_t, int64_t) { return true; }, &progress_);
  partner_.store(-1, std::memory_order_relaxed);
}

uint64_t HalvingDoubling::progress() const {
  return progress_.completed.load(std::memory_order_relaxed);
}

std::string HalvingDoubling::on_stall() {
  const int partner = partner_.load(std::memory_order_relaxed);
  if (partner < 0) return "";  // between exchanges: nothing to add
  return str(name(), " waits for rank ", partner, " (", wait_text(progress_, partner, partner),
             ")");
}

// Scratch grows to the largest slot and copy any call has needed, never per call.
void HalvingDoubling::ensure_scratch(size_t slot_elems, size_t copy_elems) {
  if (slot_elems > slot_elems_) {
    const size_t slots = static_cast<size_t>(options_.chunks_in_flight);
    recv_slots_ = allocate_scratch(slots * slot_elems * wire_bytes(options_.wire));
    if (options_.wire != Wire::fp32) send_slots_ = allocate_scratch(slots * slot_elems * 2);
    slot_elems_ = slot_elems;
  }
  if (copy_elems > copy_elems_) {
    copy_ = allocate_scratch(copy_elems * sizeof(float));
    copy_elems_ = copy_elems;
  }
}

}  // namespace ringtrain::comm::allreduce
