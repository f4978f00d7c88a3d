// shared_buckets.cpp — the node segment of every rank's fusion buffers and its in-place allreduce.
#include "ringtrain/comm/shm/shared_buckets.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "ringtrain/comm/shm/futex.hpp"
#include "ringtrain/comm/shm/shared_segment.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::comm::shm {
namespace {

constexpr size_t kLine = 64;
constexpr size_t kPartAlign = kLine / sizeof(float);  // parts start on a cache line
constexpr size_t kBlock = 2048;  // floats summed at a time: the running sum stays in L1
// The staging slots' size, the most the one-wait path can take: past it every rank reading n
// whole copies costs more than two waits on any machine measured (docs/TUNING.md).
constexpr size_t kOneWaitLimit = size_t(1) << 20;
// The probe's sizes (doubling) and calls per path and size (alternating the paths).
constexpr size_t kProbeMinBytes = 4096;
constexpr int kProbeCalls = 7;

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

size_t page_bytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? size_t(page) : 4096;
}

// RINGTRAIN_SHM_ONE_WAIT_MAX as rank 0 of node has it, on every rank: -1 when unset (probe).
// A value that is not a whole number of bytes is an input error on every rank alike.
long long one_wait_setting(MPI_Comm node) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(node, &rank));
  long long value = -1;
  const char* text = rank == 0 ? std::getenv("RINGTRAIN_SHM_ONE_WAIT_MAX") : nullptr;
  if (text) {
    char* end = nullptr;
    value = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || value < 0) value = -2;
  }
  MPI_CHECK(MPI_Bcast(&value, 1, MPI_LONG_LONG, 0, node));
  RT_REQUIRE_INPUT(value != -2, "RINGTRAIN_SHM_ONE_WAIT_MAX=", text ? text : "(rank 0's)",
                   ": expected a number of bytes");
  return value;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

// One cache line per counter: each is written by one rank and polled by the others.
struct SharedBuckets::Counters {
  alignas(kLine) std::atomic<uint32_t> arrived;
  alignas(kLine) std::atomic<uint32_t> reduced;
  alignas(kLine) std::atomic<uint32_t> done;
};

std::shared_ptr<SharedBuckets> SharedBuckets::try_make(MPI_Comm comm, size_t bytes,
                                                       std::string& why_not) {
#if defined(__linux__)
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  CommHandle node = whole_comm_on_this_node(comm, why_not);
  if (!node.valid()) return nullptr;
  std::string wait_why;
  const WaitStyle wait_style = choose_wait_style(node.get(), wait_why);
  const size_t page = page_bytes();
  const size_t control = round_up(size_t(size) * sizeof(Counters), page);
  const size_t region = round_up(std::max<size_t>(bytes, 1), page);
  const size_t slot = round_up(std::min(region, kOneWaitLimit), page);
  const long long one_wait = one_wait_setting(node.get());
  auto segment = std::make_unique<SharedSegment>(
      node.get(), control + size_t(size) * (region + 2 * slot), "buckets");
  if (!segment->data()) {
    why_not = segment->problem();
    return nullptr;
  }
  std::shared_ptr<SharedBuckets> buckets(
      new SharedBuckets(std::move(segment), rank, size, region, slot, wait_style));
  // Said only when it is not the usual spin: yielding is the oversubscribed case's answer.
  if (wait_style == WaitStyle::yield) log::info(str("shared buckets: ", wait_why));
  // Nobody may publish before every rank has constructed the counters.
  MPI_CHECK(MPI_Barrier(node.get()));
  if (one_wait >= 0) {
    buckets->set_one_wait_max_bytes(size_t(one_wait));
  } else {
    buckets->one_wait_max_bytes_ = buckets->probe_one_wait_max(node.get());
    log::info(str("shared buckets: calls up to ", buckets->one_wait_max_bytes_ >> 10,
                  " KiB wait once (every rank sums all), larger ones three times (each sums a "
                  "part): measured here at start-up"));
  }
  return buckets;
#else
  (void)comm, (void)bytes;
  why_not = "futexes are Linux only";
  return nullptr;
#endif
}

SharedBuckets::SharedBuckets(std::unique_ptr<SharedSegment> segment, int rank, int size,
                             size_t region_bytes, size_t slot_bytes, WaitStyle wait_style)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      region_bytes_(region_bytes),
      slot_bytes_(slot_bytes),
      wait_style_(wait_style) {
  control_bytes_ = round_up(size_t(size) * sizeof(Counters), page_bytes());
  // The segment is zero-filled: every counter starts at call 0, as calls_ does.
  new (&counters(rank_)) Counters{};
}

SharedBuckets::~SharedBuckets() = default;

float* SharedBuckets::region(int rank) const {
  char* base = static_cast<char*>(segment_->data());
  return reinterpret_cast<float*>(base + control_bytes_ + size_t(rank) * region_bytes_);
}

// Staging slot call % 2 of `rank`: after every region.
float* SharedBuckets::slot(int rank, uint32_t call) const {
  char* base =
      static_cast<char*>(segment_->data()) + control_bytes_ + size_t(size_) * region_bytes_;
  return reinterpret_cast<float*>(base + (size_t(rank) * 2 + call % 2) * slot_bytes_);
}

void SharedBuckets::set_one_wait_max_bytes(size_t bytes) {
  one_wait_max_bytes_ = std::min(bytes, slot_bytes_);
}

SharedBuckets::Counters& SharedBuckets::counters(int rank) const {
  return reinterpret_cast<Counters*>(segment_->data())[rank];
}

bool SharedBuckets::holds(const float* data, size_t count) const {
  const auto begin = reinterpret_cast<uintptr_t>(mine());
  const auto first = reinterpret_cast<uintptr_t>(data);
  return first >= begin && first - begin + count * sizeof(float) <= region_bytes_;
}

void SharedBuckets::wait_all(std::atomic<uint32_t> Counters::*word, uint32_t want) const {
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) wait_until_reached(counters(peer).*word, want, spin_hint_, wait_style_);
}

// Part [begin, end) of the vector at `offset` floats into every region: summed in rank order
// a block at a time (the running sum in a local buffer, so this rank's own input is read
// before its result overwrites it), divided, written to this rank's region.
void SharedBuckets::reduce_part(size_t offset, size_t begin, size_t end, float divisor) {
  alignas(kLine) float sum[kBlock];
  for (size_t block = begin; block < end; block += kBlock) {
    const size_t len = std::min(kBlock, end - block);
    const float* first = region(0) + offset + block;
    std::memcpy(sum, first, len * sizeof(float));
    for (int peer = 1; peer < size_; ++peer) {
      const float* __restrict in = region(peer) + offset + block;
      for (size_t i = 0; i < len; ++i) sum[i] += in[i];
    }
    float* __restrict out = mine() + offset + block;
    if (divisor == 1.0f)
      std::memcpy(out, sum, len * sizeof(float));
    else
      for (size_t i = 0; i < len; ++i) out[i] = sum[i] / divisor;
  }
}

uint64_t SharedBuckets::stages_done() const {
  const Counters& mine = counters(rank_);
  return uint64_t(mine.arrived.load()) + mine.reduced.load() + mine.done.load();
}

std::string SharedBuckets::describe_wait() const {
  const uint32_t call = calls_.load();
  const Counters& me = counters(rank_);
  // The stage this rank is in decides what it waits for from each peer.
  std::atomic<uint32_t> Counters::*word = &Counters::arrived;
  const char* what = "arrive";
  if (reached(me.done.load(), call)) {
    word = &Counters::done;
    what = "finish reading";
  } else if (reached(me.reduced.load(), call)) {
    word = &Counters::reduced;
    what = "reduce its part";
  }
  std::string peers;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && !reached((counters(peer).*word).load(), call))
      peers += str(peers.empty() ? "" : ", ", peer);
  if (peers.empty())
    return str("is in call ", call, " of the node's shared buckets, waiting for no peer");
  return str("waits in the node's shared buckets for rank(s) ", peers, " to ", what, " (call ",
             call, ")");
}

void SharedBuckets::allreduce(float* data, size_t count, float divisor) {
  RT_CHECK(holds(data, count), "shared-bucket allreduce: the data is not in this rank's region");
  const uint32_t call = ++calls_;
  // Every rank passes the same count and holds the same limit: every rank takes the same path.
  if (count * sizeof(float) <= one_wait_max_bytes_)
    reduce_with_one_wait(data, count, divisor, call);
  else
    reduce_in_place(data, count, divisor, call);
}

void SharedBuckets::reduce_in_place(float* data, size_t count, float divisor, uint32_t call) {
  const size_t offset = size_t(data - mine());
  auto part_begin = [&](int part) {
    return std::min(count, round_up(count * size_t(part) / size_t(size_), kPartAlign));
  };
  publish_and_wake(counters(rank_).arrived, call);
  wait_all(&Counters::arrived, call);
  reduce_part(offset, part_begin(rank_), part_begin(rank_ + 1), divisor);
  publish_and_wake(counters(rank_).reduced, call);
  // Gather from the next rank on, so the ranks do not all read one owner's part at once.
  for (int step = 1; step < size_; ++step) {
    const int owner = (rank_ + step) % size_;
    wait_until_reached(counters(owner).reduced, call, spin_hint_, wait_style_);
    const size_t begin = part_begin(owner), end = part_begin(owner + 1);
    std::memcpy(data + begin, region(owner) + offset + begin, (end - begin) * sizeof(float));
  }
  publish_and_wake(counters(rank_).done, call);
  wait_all(&Counters::done, call);
}

void SharedBuckets::reduce_with_one_wait(float* data, size_t count, float divisor, uint32_t call) {
  std::memcpy(slot(rank_, call), data, count * sizeof(float));
  publish_and_wake(counters(rank_).arrived, call);
  wait_all(&Counters::arrived, call);
  // reduce_part's operations, in its order, on the slots: the in-place path's bits.
  alignas(kLine) float sum[kBlock];
  for (size_t block = 0; block < count; block += kBlock) {
    const size_t len = std::min(kBlock, count - block);
    std::memcpy(sum, slot(0, call) + block, len * sizeof(float));
    for (int peer = 1; peer < size_; ++peer) {
      const float* __restrict in = slot(peer, call) + block;
      for (size_t i = 0; i < len; ++i) sum[i] += in[i];
    }
    float* __restrict out = data + block;
    if (divisor == 1.0f)
      std::memcpy(out, sum, len * sizeof(float));
    else
      for (size_t i = 0; i < len; ++i) out[i] = sum[i] / divisor;
  }
  // The other two stages, for stages_done() and describe_wait(); nobody waits on them for a
  // one-wait call (every rank takes the same path), so no wake-up.
  counters(rank_).reduced.store(call, std::memory_order_release);
  counters(rank_).done.store(call, std::memory_order_release);
}

// Times both paths on this rank's region (zero-filled still: the sums leave it zero) at 4 KiB,
// 8 KiB, ... up to the slots, alternating them; every rank gets the same slowest-rank times
// (MPI_MAX), so every rank decides the same. Stops at the first size the one wait loses.
size_t SharedBuckets::probe_one_wait_max(MPI_Comm node) {
  size_t best = 0;
  for (size_t bytes = kProbeMinBytes; bytes <= std::min(slot_bytes_, region_bytes_); bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    std::vector<double> took(2 * kProbeCalls);
    for (int call = 0; call < kProbeCalls; ++call)
      for (int turn = 0; turn < 2; ++turn) {
        const int path = (call + turn) % 2;  // ABBA...: neither always goes first
        const double start = now_seconds();
        const uint32_t seq = ++calls_;
        if (path == 0)
          reduce_with_one_wait(mine(), count, 1.0f, seq);
        else
          reduce_in_place(mine(), count, 1.0f, seq);
        took[size_t(2 * call + path)] = now_seconds() - start;
      }
    MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, took.data(), int(took.size()), MPI_DOUBLE, MPI_MAX, node));
    std::vector<double> one, three;
    for (int call = 0; call < kProbeCalls; ++call) {
      one.push_back(took[size_t(2 * call)]);
      three.push_back(took[size_t(2 * call + 1)]);
    }
    if (median(one) >= median(three)) break;
    best = bytes;
  }
  return best;
}

}  // namespace ringtrain::comm::shm
