// shared_buckets.cpp — the node segment of every rank's fusion buffers and its in-place allreduce.
#include "ringtrain/comm/shm/shared_buckets.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "ringtrain/comm/shm/futex.hpp"
#include "ringtrain/comm/shm/shared_segment.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::comm::shm {
namespace {

constexpr size_t kLine = 64;
constexpr size_t kPartAlign = kLine / sizeof(float);  // parts start on a cache line
constexpr size_t kBlock = 2048;  // floats summed at a time: the running sum stays in L1

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

size_t page_bytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? size_t(page) : 4096;
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
  auto segment =
      std::make_unique<SharedSegment>(node.get(), control + size_t(size) * region, "buckets");
  if (!segment->data()) {
    why_not = segment->problem();
    return nullptr;
  }
  std::shared_ptr<SharedBuckets> buckets(
      new SharedBuckets(std::move(segment), rank, size, region, wait_style));
  // Said only when it is not the usual spin: yielding is the oversubscribed case's answer.
  if (wait_style == WaitStyle::yield) log::info(str("shared buckets: ", wait_why));
  // Nobody may publish before every rank has constructed the counters.
  MPI_CHECK(MPI_Barrier(node.get()));
  return buckets;
#else
  (void)comm, (void)bytes;
  why_not = "futexes are Linux only";
  return nullptr;
#endif
}

SharedBuckets::SharedBuckets(std::unique_ptr<SharedSegment> segment, int rank, int size,
                             size_t region_bytes, WaitStyle wait_style)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      region_bytes_(region_bytes),
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

}  // namespace ringtrain::comm::shm
