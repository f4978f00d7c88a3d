// fusion_engine.hpp — gradients reduced in fixed buckets by a background thread while
// backward runs, over a schedule agreed once across ranks (plan.hpp), watched by a stall
// inspector that aborts the job instead of hanging (src/comm/fusion/stall_inspector.hpp).
//
// How a step goes (DDP-style fixed buckets, Horovod-style background thread):
//
//   plan(specs)      once, collective: fingerprint check across ranks, bucket layout,
//                    one 64-byte aligned arena; each gradient lives inside its bucket.
//   enqueue(i)       backward finished gradient i: mark it ready; when it completes the
//                    next bucket in order, wake the comm thread (no MPI on this thread).
//   comm thread      bucket 0, 1, 2, ... in that order on every rank: meets the node's other
//                    ranks at the bucket (LocalGate: asleep, not polling, while they finish
//                    it), then reduce(data, count, world size), the mean; sleeps on a
//                    condition variable in between.
//   synchronize()    waits until every bucket of the step is reduced, then opens the next.
//
// Bucket memory is touched only through FusionOptions::buffer_ops (allocate, zero, ready
// marks) and the reduce function, so the arena may live on a GPU: the engine itself
// only passes pointers along.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/comm/fusion/plan.hpp"
#include "ringtrain/comm/stall_watch.hpp"

namespace ringtrain::comm {
class Communicator;
class CommHandle;
}  // namespace ringtrain::comm

namespace ringtrain::comm::shm {
class LocalGate;
}

namespace ringtrain::comm::fusion {

class StallInspector;
struct StallState;
class Timeline;

// In-place sum across all ranks of the engine's communicator, divided by `divisor` (the world
// size: the engine wants the mean; Allreducer::sum_and_divide); collective; called only from
// the engine's comm thread, so it must not share a communicator with collectives on other
// threads.
using ReduceFn = std::function<void(float* data, size_t count, float divisor)>;

// Everything the engine does to bucket memory besides reducing it. host_buffer_ops() is plain
// host memory (64-byte aligned); a GPU backend supplies device memory and kernels instead.
struct BufferOps {
  // At least `bytes` of memory, 64-byte aligned, freed by the owner's deleter; once, in plan().
  std::function<std::shared_ptr<float>(size_t bytes)> alloc;
  // data[0, count) = 0; once, in plan(), over the whole arena: the padding must reduce to zero.
  std::function<void(float* data, size_t count)> zero;
  // On enqueue()'s thread, under the engine's lock, when a bucket's last gradient is enqueued:
  // mark the writes issued so far (a GPU backend records an event on its compute stream).
  std::function<void(size_t bucket)> mark_ready;
  // On the comm thread, before the bucket is reduced: block until what mark_ready(bucket)
  // marked has finished. Host memory is written synchronously: nothing to wait for.
  std::function<void(size_t bucket)> wait_ready;
};

BufferOps host_buffer_ops();

// comm.fusion_mib's one default: the bucket size cap an engine gets when nothing sets one (the
// benches, the tests), and where the trainer's engine starts under comm.fusion_mib = auto (the
// autotune's first trial, TuneSettings), so that an engine built directly runs as the trainer's.
constexpr double kDefaultFusionMib = 16;

struct FusionOptions {
  double fusion_mib = kDefaultFusionMib;  // bucket size cap (deck: comm.fusion_mib)
  double first_bucket_mib = 1;  // small first bucket so communication starts early; 0: no cap
                                // of its own (like the others); capped by fusion_mib
  double stall_timeout_s = 60;  // deck: comm.stall_timeout_s; 0 turns the inspector off
  bool overlap = true;          // false: buckets are reduced only in synchronize(), after backward
  bool local_gate = true;       // before each bucket, sleep until the node's ranks reach it too
                                // (LocalGate) instead of polling inside MPI meanwhile
  BufferOps buffer_ops = host_buffer_ops();  // every op must be set
  // Called on the stall watchdog's thread when it fires, while a reduction may be in progress
  // (Allreducer::on_stall): its text joins this rank's stall report. Optional.
  std::function<std::string()> on_stall;
  // Messages the reduction has completed, ever (Allreducer::progress); called on the watchdog's
  // thread at its deadline: a count that moves means bytes move, and no stall. Optional.
  std::function<uint64_t()> progress;
};

// One bucket reduction; start_s is relative to the engine's construction.
struct BucketRecord {
  int64_t step;
  int bucket;
  size_t bytes;
  int tensors;
  double start_s;
  double seconds;
  // CPU time the comm thread spent on it (CLOCK_THREAD_CPUTIME_ID): the reduction's own work
  // plus MPI's progress polling while data moves (and while a peer on another node is late;
  // local peers are waited for asleep at the gate). With one core per rank it is taken from
  // backward. `seconds` runs from the bucket's launch, the gate included.
  double cpu_seconds;
};

// The job's watchdog before any engine exists (the trainer's set-up: opening the data, building
// the model, the allreducers and the engine's plan): a collective entered through it that
// waits past the timeout ends the job with the stall inspector's report by phase, as the
// engine's watchdog does later. Collective over comm (duplicates its communicator); a timeout
// of 0 watches nothing.
class PhaseWatch final : public StallWatch {
 public:
  PhaseWatch(const Communicator& comm, double timeout_s);
  ~PhaseWatch();  // stops and joins the watchdog; never throws
  PhaseWatch(const PhaseWatch&) = delete;
  PhaseWatch& operator=(const PhaseWatch&) = delete;
  void set_phase(const std::string& phase, int64_t step, bool io) override;
  void enter_collective() override;
  void leave_collective() override;

 private:
  std::vector<GradSpec> no_specs_;
  std::vector<BucketLayout> no_buckets_;
  std::unique_ptr<StallInspector> inspector_;  // null when timeout_s is 0
};

class FusionEngine {
 public:
  // Collective over comm's ranks (duplicates its communicator). The Communicator guarantees
  // MPI_THREAD_MULTIPLE, which the comm thread needs. The timeline, when given, must outlive
  // the engine.
  FusionEngine(const Communicator& comm, ReduceFn reduce, FusionOptions options,
               Timeline* timeline = nullptr);
  ~FusionEngine();  // joins the threads; never throws
  FusionEngine(const FusionEngine&) = delete;
  FusionEngine& operator=(const FusionEngine&) = delete;

  // Collective, once. specs in the order backward produces the gradients. A fingerprint of
  // names, shapes and dtypes is compared across ranks; on a mismatch every rank throws
  // ringtrain::Error naming the first rank that differs and the tensor where it differs from
  // rank 0. Returns, per spec, where backward must write that gradient (inside its bucket).
  // Backward overwrites it each step; from synchronize() until the next backward it holds the
  // mean over ranks. The buffers are zeroed once, here, and never move. They are where
  // options.buffer_ops put them (host memory by default).
  std::vector<float*> plan(const std::vector<GradSpec>& specs);

  // Between steps (after synchronize(), before the next enqueue), on every rank at the same
  // step: from the next step on, reduce while backward runs or not, and lay the buckets out
  // anew with this cap (FusionOptions::overlap, fusion_mib; the autotune's trials). Every
  // gradient keeps its place in memory: only the bucket boundaries move.
  void retune(bool overlap, double fusion_mib);
  // The sizes of the buckets plan() would lay out with this cap (after plan()).
  std::vector<size_t> bucket_bytes_for(double fusion_mib) const;
  bool overlap() const { return options_.overlap; }
  double fusion_mib() const { return options_.fusion_mib; }

  // One line for the log: "5 buckets (first <= 1 MiB, then <= 64 MiB): 0.9, 63.8, ... MiB".
  std::string layout_summary() const;

  // Gradient `index` is complete. Thread-safe and cheap (no MPI on the caller's thread).
  // Throws ringtrain::Error naming the tensor when it was already enqueued this step.
  void enqueue(size_t index);

  // Blocks until every bucket of this step is reduced and divided by the world size, then
  // starts the next step. Throws ringtrain::Error naming the gradients never enqueued, or
  // rethrows an error of the comm thread; the engine cannot be used after either.
  void synchronize();

  // True while the calling thread waits in synchronize(): the rank's core then has nothing to
  // run but the comm thread, whose allreduce may spin (Allreducer::set_spin_hint).
  const std::atomic<bool>* main_thread_waiting() const { return &main_waiting_; }

  double last_wait_seconds() const { return last_wait_s_; }
  double last_allreduce_seconds() const { return last_allreduce_s_; }
  // Every bucket ever reduced; read it between steps (after synchronize()).
  const std::vector<BucketRecord>& records() const { return records_; }
  size_t bucket_count() const { return buckets_.size(); }
  // The job's stall watchdog, for collectives outside the engine (null when
  // stall_timeout_s is 0, or before plan()).
  StallWatch* stall_watch() const;
  const std::vector<BucketLayout>& buckets() const { return buckets_; }
  int64_t step() const { return step_; }

 private:
  using Clock = std::chrono::steady_clock;

  void check_options() const;
  double first_bucket_cap_mib() const;
  void lay_out_buckets();
  size_t plan_buckets(double fusion_mib, std::vector<BucketLayout>& buckets,
                      std::vector<size_t>& bucket_of, std::vector<size_t>& offsets) const;
  void point_buckets_into_arena();
  void comm_loop();
  void reduce_bucket(size_t b);
  void note_progress_locked(bool arm, Clock::time_point now);
  void reset_step_locked();
  StallState stall_state() const;
  void rethrow_if_broken_locked() const;

  std::unique_ptr<CommHandle> plan_comm_;  // the agreement and the set-up of gate and inspector
  int rank_ = 0;
  int world_ = 1;
  ReduceFn reduce_;
  FusionOptions options_;
  Timeline* timeline_;
  double start_s_;

  // Fixed by plan().
  std::vector<GradSpec> specs_;
  std::vector<size_t> offsets_;    // float offset of each gradient in the arena
  std::vector<size_t> bucket_of_;  // bucket index of each gradient
  std::vector<BucketLayout> buckets_;
  std::shared_ptr<float> arena_;            // from options_.buffer_ops.alloc
  std::vector<const char*> enqueue_names_;  // timeline names
  std::vector<const char*> bucket_names_;

  // Step state, guarded by mutex_.
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // comm thread: a bucket may be launched, or stop
  std::condition_variable done_cv_;  // synchronize(): the step is reduced, or failed
  std::vector<uint8_t> ready_;
  std::vector<size_t> missing_in_bucket_;
  size_t next_bucket_ = 0;  // the next bucket to reduce; == bucket_count(): step reduced
  bool flush_ = false;      // synchronize() was called this step
  bool stop_comm_ = false;
  std::exception_ptr comm_error_;
  std::string broken_;  // non-empty: an earlier error left the step unfinishable
  int64_t step_ = 0;
  std::vector<BucketRecord> records_;
  size_t step_first_record_ = 0;
  double last_wait_s_ = 0;
  double last_allreduce_s_ = 0;
  std::atomic<bool> main_waiting_{false};

  std::unique_ptr<shm::LocalGate> gate_;       // plan(); null without comm.local_gate or alone
  uint32_t gate_tickets_ = 0;                  // comm thread only
  std::unique_ptr<StallInspector> inspector_;  // plan(); null when stall_timeout_s is 0

  std::thread comm_thread_;
};

}  // namespace ringtrain::comm::fusion
