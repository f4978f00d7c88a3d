// timeline.hpp — per-rank spans (compute, comm) gathered into one Chrome-trace JSON file.
//
// Recording is a push_back into a per-thread-id buffer reserved up front: no lock, no
// allocation, no formatting on the hot path. Formatting happens once, in
// write_chrome_trace(), on every rank in parallel; rank 0 streams the result to one file
// (chrome://tracing, Perfetto: ranks are processes, thread ids are "compute", "comm", ...).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace ringtrain::comm {
class Communicator;
}

namespace ringtrain::comm::fusion {

// A named integer shown in the trace viewer's details pane ("bytes", "tensors").
struct TraceArg {
  const char* key = nullptr;  // nullptr: no argument
  int64_t value = 0;
};

class Timeline {
 public:
  static constexpr int kComputeThread = 0;
  static constexpr int kCommThread = 1;
  static constexpr int kMaxThreads = 8;

  // A disabled timeline records nothing and writes nothing; every call stays valid.
  // Each thread id keeps at most max_events_per_thread spans (64 bytes each; threads 0 and 1
  // reserve that much address space up front); later ones are counted as dropped.
  Timeline(bool enabled, int rank, size_t max_events_per_thread = size_t(1) << 20);

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }

  // Seconds on the steady clock: the clock every span's t0_s and t1_s must come from.
  static double now();

  // Records [t0_s, t1_s] on thread_id. name and category are kept as pointers: pass string
  // literals or pointers from intern(). Each thread id must be recorded by one thread at a time
  // (0 = the compute thread, 1 = the engine's comm thread).
  void span(const char* name, const char* category, double t0_s, double t1_s,
            int thread_id = kComputeThread, TraceArg a = {}, TraceArg b = {});

  // A stable copy of a name built at run time (e.g. "backward conv1"); call it once at setup.
  const char* intern(const std::string& text);
  // The name shown for a thread id; 0 is "compute" and 1 is "comm" unless renamed.
  void name_thread(int thread_id, const std::string& name);

  size_t event_count() const;
  size_t dropped_count() const;

  // Collective over comm: gathers every rank's spans to rank 0, which writes one Chrome-trace
  // JSON file atomically (temp file, then rename). Call it when no thread records any more.
  // Throws ringtrain::Error on every rank when rank 0 cannot write the file
  // (timeline_writer.cpp).
  void write_chrome_trace(const Communicator& comm, const std::string& path) const;

 private:
  struct Event {
    const char* name;
    const char* category;
    double t0_s;
    double t1_s;
    TraceArg a;
    TraceArg b;
  };

  std::string format_events(double shift_s) const;

  bool enabled_;
  int rank_;
  size_t max_events_per_thread_;
  std::array<std::vector<Event>, kMaxThreads> buffers_;
  std::array<size_t, kMaxThreads> dropped_{};
  std::array<std::string, kMaxThreads> thread_names_;
  std::mutex intern_mutex_;
  std::unordered_set<std::string> interned_;  // node-based: element addresses never move
};

// Records the span from construction to destruction; reads no clock when the timeline is null
// or disabled. { ScopedSpan s(timeline, "forward", "compute"); model.forward(batch); }
class ScopedSpan {
 public:
  ScopedSpan(Timeline* timeline, const char* name, const char* category,
             int thread_id = Timeline::kComputeThread)
      : timeline_(timeline && timeline->enabled() ? timeline : nullptr),
        name_(name),
        category_(category),
        thread_id_(thread_id),
        t0_s_(timeline_ ? Timeline::now() : 0.0) {}
  ~ScopedSpan() {
    if (timeline_) timeline_->span(name_, category_, t0_s_, Timeline::now(), thread_id_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  Timeline* timeline_;
  const char* name_;
  const char* category_;
  int thread_id_;
  double t0_s_;
};

}  // namespace ringtrain::comm::fusion
