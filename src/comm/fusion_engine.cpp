// fusion_engine.cpp — plan agreement, bucket layout, the comm thread and the stall inspector.
#include "ringtrain/comm/fusion_engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_set>

#include "ringtrain/comm/local_gate.hpp"
#include "ringtrain/comm/scratch.hpp"
#include "ringtrain/comm/timeline.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/timer.hpp"

namespace ringtrain::comm {
namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kAlignFloats = 16;  // 64 bytes: every gradient starts on a cache line
constexpr int kTagStallState = 7201;
constexpr int kTagStallPrinted = 7202;
constexpr size_t kMaxNamesListed = 8;

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(str("fusion engine: ", call, " failed: ", std::string(text, size_t(length))));
}
#define FUSION_MPI(call) check_mpi((call), #call)

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

std::string spec_text(const GradSpec& spec) {
  return spec.name + " " + shape_text(spec.shape);
}

size_t element_count(const GradSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) {
    RT_CHECK(d >= 0 && d < (int64_t(1) << 40), "gradient ", spec.name, " has a bad shape ",
             shape_text(spec.shape));
    n *= size_t(d);
  }
  RT_CHECK(n < (size_t(1) << 40), "gradient ", spec.name,
           " is too large: ", shape_text(spec.shape));
  return n;
}

// "rank 1" or "ranks 1, 2, 5" (long lists cut short).
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kMaxNamesListed; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMaxNamesListed) out += str(" and ", ranks.size() - kMaxNamesListed, " more");
  return out;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// FNV-1a over everything that must agree: count, names, shapes, dtype.
uint64_t fingerprint(const std::vector<GradSpec>& specs) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      h ^= static_cast<const unsigned char*>(data)[i];
      h *= 1099511628211ull;
    }
  };
  uint64_t count = specs.size();
  mix(&count, sizeof count);
  for (const auto& spec : specs) {
    mix(spec.name.c_str(), spec.name.size() + 1);
    uint64_t rank = spec.shape.size();
    mix(&rank, sizeof rank);
    mix(spec.shape.data(), spec.shape.size() * sizeof(int64_t));
    mix("f32", 3);
  }
  return h;
}

std::string serialize(const std::vector<GradSpec>& specs) {
  std::string out;
  auto put = [&out](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
  };
  for (const auto& spec : specs) {
    uint64_t name_size = spec.name.size(), rank = spec.shape.size();
    put(&name_size, sizeof name_size);
    put(spec.name.data(), name_size);
    put(&rank, sizeof rank);
    put(spec.shape.data(), rank * sizeof(int64_t));
  }
  return out;
}

std::vector<GradSpec> deserialize(const std::string& text) {
  std::vector<GradSpec> specs;
  size_t at = 0;
  auto get = [&](void* data, size_t size) {
    RT_CHECK(at + size <= text.size(), "fusion plan: truncated schedule from rank 0");
    std::memcpy(data, text.data() + at, size);
    at += size;
  };
  while (at < text.size()) {
    GradSpec spec;
    uint64_t name_size = 0, rank = 0;
    get(&name_size, sizeof name_size);
    spec.name.resize(name_size);
    get(spec.name.data(), name_size);
    get(&rank, sizeof rank);
    spec.shape.resize(rank);
    get(spec.shape.data(), rank * sizeof(int64_t));
    specs.push_back(std::move(spec));
  }
  return specs;
}

// Where `mine` (on rank `me`) first differs from rank 0's schedule.
std::string describe_difference(const std::vector<GradSpec>& root,
                                const std::vector<GradSpec>& mine, int me) {
  size_t i = 0;
  while (i < root.size() && i < mine.size() && root[i].name == mine[i].name &&
         root[i].shape == mine[i].shape)
    ++i;
  auto at = [i](const std::vector<GradSpec>& specs) {
    return i < specs.size() ? spec_text(specs[i])
                            : str("no gradient ", i, " (only ", specs.size(), ")");
  };
  return str("rank ", me, " differs from rank 0 at gradient ", i, ": rank ", me, " has ", at(mine),
             " but rank 0 has ", at(root));
}

void set_thread_name(std::thread& thread, const char* name) {
  pthread_setname_np(thread.native_handle(), name);
}

// Waits until every request completes or the deadline passes; true for each one that
// completed. Polls, but only on the failure path (the stall inspector).
std::vector<bool> wait_bounded(std::vector<MPI_Request>& requests, double deadline_s) {
  std::vector<bool> done(requests.size(), false);
  while (true) {
    bool all = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      if (requests[i] == MPI_REQUEST_NULL) {
        done[i] = true;
        continue;
      }
      int flag = 0;
      if (MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        requests[i] = MPI_REQUEST_NULL;  // a rank that already left: count it as silent
        continue;
      }
      if (flag) done[i] = true;
      all = all && done[i];
    }
    if (all || Timeline::now() >= deadline_s) return done;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

BufferOps host_buffer_ops() {
  BufferOps ops;
  ops.alloc = [](size_t bytes) {
    ScratchBytes memory;
    try {
      memory = allocate_scratch(bytes);
    } catch (const std::bad_alloc&) {
      RT_CHECK(false, "cannot allocate ", bytes, " bytes of fusion buffers");
    }
    return std::shared_ptr<float>(reinterpret_cast<float*>(memory.release()), FreeDeleter());
  };
  ops.zero = [](float* data, size_t count) { std::memset(data, 0, count * sizeof(float)); };
  ops.mark_ready = [](size_t) {};
  ops.wait_ready = [](size_t) {};
  return ops;
}

// ---- what a rank tells the others when the stall inspector fires --------------------------

struct FusionEngine::StallReport {
  static constexpr size_t kHeader = 3 * sizeof(int64_t);
  struct RankState {
    int64_t step = 0;
    int64_t next_bucket = 0;
    bool in_synchronize = false;
    const uint8_t* ready = nullptr;
  };
  static RankState decode(const std::vector<uint8_t>& record) {
    RankState state;
    int64_t header[3];
    std::memcpy(header, record.data(), kHeader);
    state.step = header[0];
    state.next_bucket = header[1];
    state.in_synchronize = header[2] != 0;
    state.ready = record.data() + kHeader;
    return state;
  }
};

std::vector<uint8_t> FusionEngine::stall_record_locked() const {
  std::vector<uint8_t> record(StallReport::kHeader + ready_.size());
  int64_t header[3] = {step_, int64_t(next_bucket_), flush_ ? 1 : 0};
  std::memcpy(record.data(), header, StallReport::kHeader);
  std::copy(ready_.begin(), ready_.end(), record.begin() + StallReport::kHeader);
  return record;
}

// ---- construction and plan ----------------------------------------------------------------

FusionEngine::FusionEngine(MPI_Comm comm, ReduceFn reduce, FusionOptions options,
                           Timeline* timeline)
    : reduce_(std::move(reduce)),
      options_(options),
      timeline_(timeline),
      start_s_(Timeline::now()) {
  RT_CHECK(reduce_, "FusionEngine needs a reduce function");
  const BufferOps& ops = options_.buffer_ops;
  if (!(ops.alloc && ops.zero && ops.mark_ready && ops.wait_ready))
    throw Error("FusionEngine: every BufferOps member must be set (start from host_buffer_ops())");
  check_options();
  int provided = 0;
  FUSION_MPI(MPI_Query_thread(&provided));
  RT_CHECK(provided == MPI_THREAD_MULTIPLE,
           "FusionEngine needs MPI_THREAD_MULTIPLE (its comm thread calls MPI beside the "
           "caller's), but MPI provides level ",
           provided, " --->HINT: start MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE)");
  FUSION_MPI(MPI_Comm_rank(comm, &rank_));
  FUSION_MPI(MPI_Comm_size(comm, &world_));
  FUSION_MPI(MPI_Comm_dup(comm, &plan_comm_));
  FUSION_MPI(MPI_Comm_dup(comm, &stall_comm_));
  // A peer that already left must not turn the stall report itself into an abort.
  MPI_Comm_set_errhandler(stall_comm_, MPI_ERRORS_RETURN);
}

FusionEngine::~FusionEngine() {
  try {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_comm_ = true;
    }
    work_cv_.notify_all();
    // The watchdog keeps running until the comm thread has stopped: a reduction stuck on a
    // peer while we unwind still ends in a stall report, not a hang.
    if (comm_thread_.joinable()) comm_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_watchdog_ = true;
    }
    watchdog_cv_.notify_all();
    if (watchdog_thread_.joinable()) watchdog_thread_.join();
  } catch (...) {
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (plan_comm_ != MPI_COMM_NULL) MPI_Comm_free(&plan_comm_);
    if (stall_comm_ != MPI_COMM_NULL) MPI_Comm_free(&stall_comm_);
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
  agree_on_plan(specs);
  specs_ = specs;
  lay_out_buckets();
  if (options_.local_gate && world_ > 1) {
    gate_ = std::make_unique<LocalGate>(plan_comm_);
    if (!gate_->problem().empty())
      std::fprintf(stderr, "ringtrain: warning: rank %d: %s; waits for peers poll inside MPI\n",
                   rank_, gate_->problem().c_str());
  }

  ready_.assign(specs_.size(), 0);
  missing_in_bucket_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) missing_in_bucket_[b] = buckets_[b].tensor_count;
  if (timeline_) {
    for (const auto& spec : specs_) enqueue_names_.push_back(timeline_->intern(spec.name));
    for (size_t b = 0; b < buckets_.size(); ++b)
      bucket_names_.push_back(timeline_->intern(str("allreduce bucket ", b)));
  }

  comm_thread_ = std::thread([this] { comm_loop(); });
  set_thread_name(comm_thread_, "rt-comm");
  if (options_.stall_timeout_s > 0) {
    watchdog_thread_ = std::thread([this] { watchdog_loop(); });
    set_thread_name(watchdog_thread_, "rt-stall");
  }

  std::vector<float*> where(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) where[i] = arena_.get() + offsets_[i];
  return where;
}

// Every rank must build the same buckets, or the reductions would pair up different data (or
// hang): compare the options and the schedule's fingerprint across ranks, once.
// A problem with one rank's own specs (a bad shape, a name twice) is also thrown on every rank.
void FusionEngine::agree_on_plan(const std::vector<GradSpec>& specs) const {
  std::string local_error;
  try {
    std::unordered_set<std::string> names;
    for (const auto& spec : specs) {
      element_count(spec);
      RT_CHECK(names.insert(spec.name).second, "gradient name ", spec.name,
               " appears twice in the fusion plan; names must be unique");
    }
  } catch (const Error& e) {
    local_error = e.what();
  }
  struct Summary {
    uint64_t fingerprint;
    double fusion_mib, first_bucket_mib, stall_timeout_s, local_gate;
    int32_t local_error;
  } mine{fingerprint(specs),
         options_.fusion_mib,
         options_.first_bucket_mib,
         options_.stall_timeout_s,
         options_.local_gate ? 1.0 : 0.0,
         local_error.empty() ? 0 : 1};
  std::vector<Summary> all(static_cast<size_t>(world_));
  FUSION_MPI(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, plan_comm_));

  for (int r = 0; r < world_; ++r) {
    if (!all[size_t(r)].local_error) continue;
    uint64_t size = local_error.size();
    FUSION_MPI(MPI_Bcast(&size, 1, MPI_UINT64_T, r, plan_comm_));
    local_error.resize(size);
    FUSION_MPI(MPI_Bcast(local_error.data(), int(size), MPI_CHAR, r, plan_comm_));
    throw Error(str("fusion plan: rank ", r, ": ", local_error));
  }

  const Summary& root = all[0];
  for (int r = 1; r < world_; ++r) {
    const Summary& s = all[size_t(r)];
    auto differs = [&](const char* key, double theirs, double root_value) {
      if (theirs != root_value)
        throw Error(str("fusion options differ across ranks: rank ", r, " has comm.", key, " = ",
                        theirs, " but rank 0 has ", root_value,
                        " (every rank must read the same deck)"));
    };
    differs("fusion_mib", s.fusion_mib, root.fusion_mib);
    differs("first_bucket_mib", s.first_bucket_mib, root.first_bucket_mib);
    differs("stall_timeout_s", s.stall_timeout_s, root.stall_timeout_s);
    differs("local_gate", s.local_gate, root.local_gate);
  }

  std::vector<int> differing;
  for (int r = 1; r < world_; ++r)
    if (all[size_t(r)].fingerprint != root.fingerprint) differing.push_back(r);
  if (differing.empty()) return;

  // Rare path: rank 0 sends its schedule; the first differing rank finds the first difference
  // and every rank throws the message that rank wrote.
  std::string root_text = rank_ == 0 ? serialize(specs) : std::string();
  uint64_t size = root_text.size();
  FUSION_MPI(MPI_Bcast(&size, 1, MPI_UINT64_T, 0, plan_comm_));
  root_text.resize(size);
  FUSION_MPI(MPI_Bcast(root_text.data(), int(size), MPI_CHAR, 0, plan_comm_));
  int first = differing.front();
  std::string message;
  if (rank_ == first) {
    message = "fusion plan mismatch: " + describe_difference(deserialize(root_text), specs, first);
    if (differing.size() > 1)
      message +=
          str(" (", differing.size(), " ranks differ from rank 0: ", ranks_text(differing), ")");
    message +=
        " (every rank must plan the same gradients, in the same order, with the same shapes)";
  }
  uint64_t message_size = message.size();
  FUSION_MPI(MPI_Bcast(&message_size, 1, MPI_UINT64_T, first, plan_comm_));
  message.resize(message_size);
  FUSION_MPI(MPI_Bcast(message.data(), int(message_size), MPI_CHAR, first, plan_comm_));
  throw Error(message);
}

// Greedy, in backward order: a gradient joins the current bucket while the bucket stays within
// its cap, else opens a new one; a gradient larger than the cap gets a bucket of its own.
// Small gradients (at most 1/64 of the cap: biases, batch-norm scales) join the current bucket
// even past the cap, by up to 1/8 of it. Otherwise resnet18's batch-norm parameters, which
// come between two 9 MiB convolutions in backward order, made 4 KiB buckets of their own,
// each one more allreduce with its latency (and two more thread wake-ups) inside backward.
void FusionEngine::lay_out_buckets() {
  auto cap_bytes = [](double mib) { return std::max<size_t>(64, size_t(mib * double(kMiB))); };
  size_t first_cap = cap_bytes(first_bucket_cap_mib());
  size_t rest_cap = cap_bytes(options_.fusion_mib);

  size_t offset = 0;   // floats
  size_t largest = 0;  // the current bucket's largest gradient, bytes
  for (size_t i = 0; i < specs_.size(); ++i) {
    size_t padded = (element_count(specs_[i]) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    size_t bytes = padded * sizeof(float);
    size_t cap = buckets_.size() == 1 ? first_cap : rest_cap;  // the current bucket's cap
    bool fits = !buckets_.empty() && buckets_.back().bytes + bytes <= cap;
    bool rides_along = !buckets_.empty() && bytes <= cap / 64 &&
                       buckets_.back().bytes + bytes <= std::max(cap, largest) + cap / 8;
    if (!fits && !rides_along) {
      buckets_.push_back(BucketLayout{i, 0, 0, nullptr});
      largest = 0;
    }
    buckets_.back().tensor_count += 1;
    buckets_.back().bytes += bytes;
    largest = std::max(largest, bytes);
    bucket_of_.push_back(buckets_.size() - 1);
    offsets_.push_back(offset);
    offset += padded;
  }

  size_t total_bytes = std::max<size_t>(64, offset * sizeof(float));
  arena_ = options_.buffer_ops.alloc(total_bytes);
  RT_CHECK(arena_, "cannot allocate ", total_bytes, " bytes of fusion buffers");
  // The padding between gradients must reduce to zero.
  options_.buffer_ops.zero(arena_.get(), total_bytes / sizeof(float));
  float* memory = arena_.get();
  for (auto& bucket : buckets_) bucket.data = memory + offsets_[bucket.first_tensor];
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
             " (first <= ", seconds_text(first_bucket_cap_mib()),
             " MiB, then <= ", seconds_text(options_.fusion_mib), " MiB) for ", specs_.size(),
             " gradients: ", sizes, " MiB");
}

// ---- the step ------------------------------------------------------------------------------

void FusionEngine::note_progress_locked(bool arm, Clock::time_point now) {
  last_progress_ = now;
  if (arm && !armed_) {
    armed_ = true;
    watchdog_cv_.notify_one();  // once per step: the watchdog now counts from last_progress_
  }
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
  armed_ = false;
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

// ---- the stall inspector -------------------------------------------------------------------

void FusionEngine::watchdog_loop() {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.stall_timeout_s));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_watchdog_) {
    if (!armed_) {
      watchdog_cv_.wait(lock);
      continue;
    }
    auto deadline = last_progress_ + timeout;
    if (Clock::now() >= deadline) {
      std::vector<uint8_t> mine = stall_record_locked();
      lock.unlock();
      inspect_stall_and_abort(std::move(mine));
    }
    watchdog_cv_.wait_until(lock, deadline);
  }
}

// The one line every rank prints: which bucket, which tensors, which ranks, and why.
std::string FusionEngine::describe_stall(const std::vector<std::vector<uint8_t>>& records,
                                         const std::vector<bool>& answered, double window_s) const {
  std::vector<StallReport::RankState> state(records.size());
  std::vector<int> silent;
  int64_t step = INT64_MAX;
  for (size_t r = 0; r < records.size(); ++r) {
    if (!answered[r]) {
      silent.push_back(int(r));
      continue;
    }
    state[r] = StallReport::decode(records[r]);
    step = std::min(step, state[r].step);
  }
  // The oldest unreduced bucket of the oldest step; a rank already past that step has it all.
  int64_t bucket = int64_t(buckets_.size());
  for (size_t r = 0; r < records.size(); ++r)
    if (answered[r] && state[r].step == step) bucket = std::min(bucket, state[r].next_bucket);
  bucket = std::min<int64_t>(bucket, int64_t(buckets_.size()) - 1);
  std::string line = str("stall: after ", seconds_text(options_.stall_timeout_s), " s, bucket ",
                         bucket, " of step ", step);
  std::string silent_text =
      silent.empty() ? std::string()
                     : str(ranks_text(silent), " did not answer within ", seconds_text(window_s),
                           " s: stuck outside the engine (e.g. in compute or I/O) or exited");

  // Missing tensors of that bucket, grouped by the set of ranks that lack them.
  std::vector<std::pair<std::vector<int>, std::vector<std::string>>> groups;
  std::vector<int> stopped, in_synchronize;
  std::vector<bool> lacks(records.size(), false);
  size_t total_missing = 0;
  if (bucket >= 0) {
    const BucketLayout& layout = buckets_[size_t(bucket)];
    for (size_t i = layout.first_tensor; i < layout.first_tensor + layout.tensor_count; ++i) {
      std::vector<int> ranks;
      for (size_t r = 0; r < records.size(); ++r)
        if (answered[r] && state[r].step == step && !state[r].ready[i]) ranks.push_back(int(r));
      if (ranks.empty()) continue;
      for (int r : ranks) lacks[size_t(r)] = true;
      if (++total_missing > kMaxNamesListed) continue;
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == ranks; });
      if (group == groups.end()) group = groups.insert(groups.end(), {ranks, {}});
      group->second.push_back(spec_text(specs_[i]));
    }
  }
  for (size_t r = 0; r < records.size(); ++r)
    if (lacks[r]) (state[r].in_synchronize ? in_synchronize : stopped).push_back(int(r));

  if (total_missing == 0 && silent.empty())
    return line +
           " has every gradient on every rank, but its allreduce has not finished "
           "(a rank is stuck inside the reduction)";
  if (total_missing == 0)
    return line + " still waits for " + ranks_text(silent) + ", which did not answer within " +
           seconds_text(window_s) +
           " s (stuck outside the engine, e.g. in compute or I/O, or exited)";
  line += " still waits for ";
  for (size_t g = 0; g < groups.size(); ++g) {
    line += g ? "; " : "";
    for (size_t k = 0; k < groups[g].second.size(); ++k)
      line += (k ? ", " : "") + groups[g].second[k];
    line += " on " + ranks_text(groups[g].first);
  }
  if (total_missing > kMaxNamesListed)
    line += str(" (and ", total_missing - kMaxNamesListed, " more)");
  std::vector<std::string> causes;
  if (!stopped.empty()) causes.push_back(ranks_text(stopped) + " stopped enqueuing");
  if (!in_synchronize.empty())
    causes.push_back(ranks_text(in_synchronize) + " called synchronize() without them");
  if (!silent.empty()) causes.push_back(silent_text);
  line += " (";
  for (size_t k = 0; k < causes.size(); ++k) line += (k ? "; " : "") + causes[k];
  return line + ")";
}

// Runs on the watchdog thread once no progress came for stall_timeout_s. Every rank whose
// watchdog fires sends its state to every other rank; each waits a bounded time for the
// others, prints one line, waits (bounded) until the others printed too, then aborts the job.
void FusionEngine::inspect_stall_and_abort(std::vector<uint8_t> mine) {
  const double window_s = std::clamp(options_.stall_timeout_s, 1.0, 5.0);
  const size_t n = size_t(world_), me = size_t(rank_);
  std::vector<std::vector<uint8_t>> records(n, std::vector<uint8_t>(mine.size()));
  records[me] = mine;
  std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
  for (size_t r = 0; r < n; ++r) {
    if (r == me) continue;
    MPI_Irecv(records[r].data(), int(mine.size()), MPI_BYTE, int(r), kTagStallState, stall_comm_,
              &receives[r]);
    MPI_Isend(mine.data(), int(mine.size()), MPI_BYTE, int(r), kTagStallState, stall_comm_,
              &sends[r]);
  }
  std::vector<bool> answered = wait_bounded(receives, Timeline::now() + window_s);

  std::string line = describe_stall(records, answered, window_s);
  std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", rank_, line.c_str());
  std::fflush(stderr);

  // The first MPI_Abort kills the whole job: give every rank that answered the time to print.
  std::vector<uint8_t> printed(n, 0);
  uint8_t yes = 1;
  std::vector<MPI_Request> acks(n, MPI_REQUEST_NULL), notes(n, MPI_REQUEST_NULL);
  for (size_t r = 0; r < n; ++r) {
    if (r == me || !answered[r]) continue;
    MPI_Irecv(&printed[r], 1, MPI_BYTE, int(r), kTagStallPrinted, stall_comm_, &acks[r]);
    MPI_Isend(&yes, 1, MPI_BYTE, int(r), kTagStallPrinted, stall_comm_, &notes[r]);
  }
  wait_bounded(acks, Timeline::now() + window_s);
  MPI_Abort(stall_comm_, kExitFailure);
  std::_Exit(kExitFailure);
}

}  // namespace ringtrain::comm
