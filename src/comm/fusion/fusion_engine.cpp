// fusion_engine.cpp — bucket layout, the comm thread, enqueue and synchronize.
#include "ringtrain/comm/fusion/fusion_engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>

#include "names.hpp"
#include "ringtrain/comm/allreduce/scratch.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/comm/shm/local_gate.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"
#include "stall_inspector.hpp"

namespace ringtrain::comm::fusion {
namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kAlignFloats = 16;  // 64 bytes: every gradient starts on a cache line

}  // namespace

BufferOps host_buffer_ops() {
  BufferOps ops;
  ops.alloc = [](size_t bytes) {
    allreduce::ScratchBytes memory;
    try {
      memory = allreduce::allocate_scratch(bytes);
    } catch (const std::bad_alloc&) {
      RT_CHECK(false, "cannot allocate ", bytes, " bytes of fusion buffers");
    }
    return std::shared_ptr<float>(reinterpret_cast<float*>(memory.release()),
                                  allreduce::FreeDeleter());
  };
  ops.zero = [](float* data, size_t count) { std::memset(data, 0, count * sizeof(float)); };
  ops.mark_ready = [](size_t) {};
  ops.wait_ready = [](size_t) {};
  return ops;
}

// ---- the watchdog before the engine -------------------------------------------------------

PhaseWatch::PhaseWatch(const Communicator& comm, double timeout_s) {
  // No plan yet: a rank's state is only the phase it waits in.
  if (timeout_s > 0)
    inspector_ = std::make_unique<StallInspector>(comm.raw(), timeout_s, no_specs_, no_buckets_,
                                                  [] { return StallState{}; });
}

PhaseWatch::~PhaseWatch() = default;

void PhaseWatch::set_phase(const std::string& phase, int64_t step, bool io) {
  if (inspector_) inspector_->set_phase(phase, step, io);
}

void PhaseWatch::enter_collective() {
  if (inspector_) inspector_->enter_collective();
}

void PhaseWatch::leave_collective() {
  if (inspector_) inspector_->leave_collective();
}

// ---- construction and plan ----------------------------------------------------------------

FusionEngine::FusionEngine(const Communicator& comm, ReduceFn reduce, FusionOptions options,
                           Timeline* timeline)
    : plan_comm_(std::make_unique<CommHandle>(duplicate(comm.raw()))),
      rank_(comm.rank()),
      world_(comm.size()),
      reduce_(std::move(reduce)),
      options_(options),
      timeline_(timeline),
      start_s_(Timeline::now()) {
  RT_CHECK(reduce_, "FusionEngine needs a reduce function");
  const BufferOps& ops = options_.buffer_ops;
  if (!(ops.alloc && ops.zero && ops.mark_ready && ops.wait_ready))
    throw Error("FusionEngine: every BufferOps member must be set (start from host_buffer_ops())");
  check_options();
}

FusionEngine::~FusionEngine() {
  try {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_comm_ = true;
    }
    work_cv_.notify_all();
    // The inspector keeps watching until the comm thread has stopped: a reduction stuck on a
    // peer while we unwind still ends in a stall report, not a hang.
    if (comm_thread_.joinable()) comm_thread_.join();
    inspector_.reset();
  } catch (...) {
  }
}

void FusionEngine::check_options() const {
  RT_REQUIRE_INPUT(std::isfinite(options_.fusion_mib) && options_.fusion_mib > 0,
                   "comm.fusion_mib = ", options_.fusion_mib, ": must be a size in MiB > 0");
  RT_REQUIRE_INPUT(std::isfinite(options_.first_bucket_mib) && options_.first_bucket_mib >= 0,
                   "comm.first_bucket_mib = ", options_.first_bucket_mib,
                   ": must be a size in MiB >= 0 (0: the first bucket is as large as the others)");
  RT_REQUIRE_INPUT(std::isfinite(options_.stall_timeout_s) && options_.stall_timeout_s >= 0,
                   "comm.stall_timeout_s = ", options_.stall_timeout_s,
                   ": must be seconds >= 0 (0 turns the stall inspector off)");
}

std::vector<float*> FusionEngine::plan(const std::vector<GradSpec>& specs) {
  RT_CHECK(!arena_, "FusionEngine::plan() called twice; one engine serves one schedule");
  agree_on_plan(*plan_comm_, specs,
                {{"fusion_mib", options_.fusion_mib},
                 {"first_bucket_mib", options_.first_bucket_mib},
                 {"stall_timeout_s", options_.stall_timeout_s},
                 {"local_gate", options_.local_gate ? 1.0 : 0.0}});
  specs_ = specs;
  lay_out_buckets();
  if (options_.local_gate && world_ > 1) {
    gate_ = std::make_unique<shm::LocalGate>(plan_comm_->get());
    if (!gate_->problem().empty())
      std::fprintf(stderr, "ringtrain: warning: rank %d: %s; waits for peers poll inside MPI\n",
                   rank_, gate_->problem().c_str());
  }

  ready_.assign(specs_.size(), 0);
  if (timeline_)
    for (const auto& spec : specs_) enqueue_names_.push_back(timeline_->intern(spec.name));

  if (options_.stall_timeout_s > 0)
    inspector_ = std::make_unique<StallInspector>(
        plan_comm_->get(), options_.stall_timeout_s, specs_, buckets_,
        [this] { return stall_state(); }, options_.progress);
  comm_thread_ = std::thread([this] { comm_loop(); });
  pthread_setname_np(comm_thread_.native_handle(), "rt-comm");

  std::vector<float*> where(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) where[i] = arena_.get() + offsets_[i];
  return where;
}

// The layout, then the arena it needs, zeroed.
void FusionEngine::lay_out_buckets() {
  const size_t floats = plan_buckets(options_.fusion_mib, buckets_, bucket_of_, offsets_);
  size_t total_bytes = std::max<size_t>(64, floats * sizeof(float));
  arena_ = options_.buffer_ops.alloc(total_bytes);
  RT_CHECK(arena_, "cannot allocate ", total_bytes, " bytes of fusion buffers");
  // The padding between gradients must reduce to zero.
  options_.buffer_ops.zero(arena_.get(), total_bytes / sizeof(float));
  point_buckets_into_arena();
}

// Greedy, in backward order: a gradient joins the current bucket while the bucket stays within
// its cap, else opens a new one; a gradient larger than the cap gets a bucket of its own.
// Small gradients (at most 1/64 of the cap: biases, batch-norm scales) join the current bucket
// even past the cap, by up to 1/8 of it. Otherwise resnet18's batch-norm parameters, which
// come between two 9 MiB convolutions in backward order, made 4 KiB buckets of their own,
// each one more allreduce with its latency (and two more thread wake-ups) inside backward.
// Each gradient's offset depends only on the gradients before it, never on the caps: a new
// layout (retune) keeps every gradient where backward writes it. Returns the arena's floats.
size_t FusionEngine::plan_buckets(double fusion_mib, std::vector<BucketLayout>& buckets,
                                  std::vector<size_t>& bucket_of,
                                  std::vector<size_t>& offsets) const {
  auto cap_bytes = [](double mib) { return std::max<size_t>(64, size_t(mib * double(kMiB))); };
  const double first_mib =
      options_.first_bucket_mib > 0 ? std::min(options_.first_bucket_mib, fusion_mib) : fusion_mib;
  size_t first_cap = cap_bytes(first_mib);
  size_t rest_cap = cap_bytes(fusion_mib);
  buckets.clear();
  bucket_of.clear();
  offsets.clear();

  size_t offset = 0;   // floats
  size_t largest = 0;  // the current bucket's largest gradient, bytes
  for (size_t i = 0; i < specs_.size(); ++i) {
    size_t padded = (element_count(specs_[i]) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    size_t bytes = padded * sizeof(float);
    size_t cap = buckets.size() == 1 ? first_cap : rest_cap;  // the current bucket's cap
    bool fits = !buckets.empty() && buckets.back().bytes + bytes <= cap;
    bool rides_along = !buckets.empty() && bytes <= cap / 64 &&
                       buckets.back().bytes + bytes <= std::max(cap, largest) + cap / 8;
    if (!fits && !rides_along) {
      buckets.push_back(BucketLayout{i, 0, 0, nullptr});
      largest = 0;
    }
    buckets.back().tensor_count += 1;
    buckets.back().bytes += bytes;
    largest = std::max(largest, bytes);
    bucket_of.push_back(buckets.size() - 1);
    offsets.push_back(offset);
    offset += padded;
  }
  return offset;
}

void FusionEngine::point_buckets_into_arena() {
  float* memory = arena_.get();
  for (auto& bucket : buckets_) bucket.data = memory + offsets_[bucket.first_tensor];
  missing_in_bucket_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) missing_in_bucket_[b] = buckets_[b].tensor_count;
  if (timeline_)
    for (size_t b = bucket_names_.size(); b < buckets_.size(); ++b)
      bucket_names_.push_back(timeline_->intern(str("allreduce bucket ", b)));
}

std::vector<size_t> FusionEngine::bucket_bytes_for(double fusion_mib) const {
  std::vector<BucketLayout> buckets;
  std::vector<size_t> bucket_of, offsets;
  plan_buckets(fusion_mib, buckets, bucket_of, offsets);
  std::vector<size_t> bytes;
  for (const BucketLayout& b : buckets) bytes.push_back(b.bytes);
  return bytes;
}

void FusionEngine::retune(bool overlap, double fusion_mib) {
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_if_broken_locked();
  RT_CHECK(arena_, "FusionEngine::retune before plan()");
  const bool between_steps =
      next_bucket_ == 0 && std::none_of(ready_.begin(), ready_.end(), [](uint8_t r) { return r; });
  RT_CHECK(between_steps, "FusionEngine::retune in step ", step_,
           " after gradients were enqueued: only between synchronize() and the next enqueue");
  options_.overlap = overlap;
  options_.fusion_mib = fusion_mib;
  check_options();
  plan_buckets(options_.fusion_mib, buckets_, bucket_of_, offsets_);
  point_buckets_into_arena();
}

double FusionEngine::first_bucket_cap_mib() const {
  return options_.first_bucket_mib > 0 ? std::min(options_.first_bucket_mib, options_.fusion_mib)
                                       : options_.fusion_mib;
}

std::string FusionEngine::layout_summary() const {
  std::string sizes;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (b == kMaxNamesListed && buckets_.size() > kMaxNamesListed + 1) {
      sizes += str(", ... (", buckets_.size() - b, " more)");
      break;
    }
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.3g", double(buckets_[b].bytes) / double(kMiB));
    sizes += (b ? ", " : "") + std::string(mib);
  }
  return str(buckets_.size(), buckets_.size() == 1 ? " bucket" : " buckets",
             " (first <= ", number_text(first_bucket_cap_mib()),
             " MiB, then <= ", number_text(options_.fusion_mib), " MiB) for ", specs_.size(),
             " gradients: ", sizes, " MiB");
}

// ---- the step ------------------------------------------------------------------------------

void FusionEngine::note_progress_locked(bool arm, Clock::time_point now) {
  if (inspector_) inspector_->note_progress(arm, now);
}

StallWatch* FusionEngine::stall_watch() const {
  return inspector_.get();
}

StallState FusionEngine::stall_state() const {
  // Before the engine's lock: the reduction in progress does not hold it.
  std::string detail = options_.on_stall ? options_.on_stall() : std::string();
  std::lock_guard<std::mutex> lock(mutex_);
  StallState state;
  state.detail = std::move(detail);
  state.step = step_;
  state.next_bucket = int64_t(next_bucket_);
  state.in_synchronize = flush_;
  state.ready = ready_;
  return state;
}

void FusionEngine::rethrow_if_broken_locked() const {
  if (comm_error_) std::rethrow_exception(comm_error_);
  if (!broken_.empty()) throw Error("fusion engine unusable after an earlier error: " + broken_);
}

void FusionEngine::enqueue(size_t index) {
  const auto start = Clock::now();  // one clock read serves the watchdog and the timeline
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_if_broken_locked();
    RT_CHECK(index < specs_.size(), "enqueue(", index, "): the plan has ", specs_.size(),
             " gradients", arena_ ? "" : " (plan() was not called)");
    if (ready_[index])
      throw Error(str("gradient ", spec_text(specs_[index]), " (index ", index,
                      ") enqueued twice in step ", step_,
                      " (enqueue each gradient once per step, after backward has written it)"));
    size_t b = bucket_of_[index];
    // Before the bucket counts as complete: the comm thread waits on this mark.
    if (missing_in_bucket_[b] == 1) options_.buffer_ops.mark_ready(b);
    ready_[index] = 1;
    note_progress_locked(true, start);
    if (--missing_in_bucket_[b] == 0 && b == next_bucket_ && options_.overlap)
      work_cv_.notify_one();
  }
  if (timeline_ && timeline_->enabled())
    timeline_->span(enqueue_names_[index], "enqueue",
                    std::chrono::duration<double>(start.time_since_epoch()).count(),
                    Timeline::now());
}

void FusionEngine::synchronize() {
  double t0 = Timeline::now();
  std::unique_lock<std::mutex> lock(mutex_);
  rethrow_if_broken_locked();
  std::vector<size_t> missing;
  for (size_t i = 0; i < ready_.size(); ++i)
    if (!ready_[i]) missing.push_back(i);
  flush_ = true;
  note_progress_locked(true, Clock::now());
  if (!missing.empty()) {
    std::string names;
    for (size_t k = 0; k < missing.size() && k < kMaxNamesListed; ++k)
      names += (k ? ", " : "") + spec_text(specs_[missing[k]]);
    if (missing.size() > kMaxNamesListed)
      names += str(", and ", missing.size() - kMaxNamesListed, " more");
    // The watchdog stays armed: if the other ranks wait for these gradients, the stall
    // inspector reports this rank as having called synchronize() without them.
    broken_ = str("synchronize() in step ", step_, ": ", missing.size(), " of ", ready_.size(),
                  " gradients never enqueued: ", names,
                  " (backward must enqueue every planned gradient once per step)");
    throw Error(broken_);
  }
  work_cv_.notify_one();
  main_waiting_.store(true, std::memory_order_relaxed);
  done_cv_.wait(lock, [this] { return next_bucket_ == buckets_.size() || comm_error_; });
  main_waiting_.store(false, std::memory_order_relaxed);
  if (comm_error_) std::rethrow_exception(comm_error_);

  last_allreduce_s_ = 0;
  for (size_t k = step_first_record_; k < records_.size(); ++k)
    last_allreduce_s_ += records_[k].seconds;
  reset_step_locked();
  lock.unlock();
  double t1 = Timeline::now();
  last_wait_s_ = t1 - t0;
  if (timeline_) timeline_->span("synchronize wait", "wait", t0, t1);
}

void FusionEngine::reset_step_locked() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) missing_in_bucket_[b] = buckets_[b].tensor_count;
  next_bucket_ = 0;
  flush_ = false;
  if (inspector_) inspector_->disarm();
  ++step_;
  step_first_record_ = records_.size();
}

// ---- the comm thread -----------------------------------------------------------------------

void FusionEngine::comm_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto launchable = [this] {
    return next_bucket_ < buckets_.size() && missing_in_bucket_[next_bucket_] == 0 &&
           (options_.overlap || flush_);
  };
  while (true) {
    work_cv_.wait(lock, [&] { return stop_comm_ || launchable(); });
    // Even when stopping, reduce every bucket that is complete: the other ranks launch the
    // same ones (same enqueued set, same order), and would wait forever for our half.
    if (!launchable()) return;
    size_t b = next_bucket_;
    lock.unlock();
    double t0 = 0, cpu0 = 0;
    try {
      options_.buffer_ops.wait_ready(b);  // not timed: the gradients' compute, not comm
      t0 = Timeline::now();
      cpu0 = thread_cpu_seconds();
      // Every rank reduces the same buckets in the same order, so the tickets agree.
      if (gate_) gate_->arrive_and_wait(++gate_tickets_);
      reduce_bucket(b);
    } catch (...) {
      lock.lock();
      comm_error_ = std::current_exception();
      done_cv_.notify_all();
      return;
    }
    double t1 = Timeline::now(), cpu = thread_cpu_seconds() - cpu0;
    const BucketLayout& bucket = buckets_[b];
    if (timeline_)
      timeline_->span(bucket_names_[b], "comm", t0, t1, Timeline::kCommThread,
                      {"bytes", int64_t(bucket.bytes)}, {"tensors", int64_t(bucket.tensor_count)});
    lock.lock();
    records_.push_back(BucketRecord{step_, int(b), bucket.bytes, int(bucket.tensor_count),
                                    t0 - start_s_, t1 - t0, cpu});
    ++next_bucket_;
    note_progress_locked(false, Clock::now());
    if (next_bucket_ == buckets_.size()) done_cv_.notify_one();
  }
}

void FusionEngine::reduce_bucket(size_t b) {
  const BucketLayout& bucket = buckets_[b];
  size_t count = bucket.bytes / sizeof(float);
  reduce_(bucket.data, count, float(world_));
}

}  // namespace ringtrain::comm::fusion
