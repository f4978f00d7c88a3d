// timeline.cpp — span recording and the Chrome-trace JSON of one rank's spans.
#include "ringtrain/comm/fusion/timeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::fusion {
namespace {

void append_json_string(std::string& out, const char* text) {
  out += '"';
  for (const char* c = text ? text : ""; *c; ++c) {
    unsigned char ch = static_cast<unsigned char>(*c);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", ch);
      out += escaped;
    } else {
      out += char(ch);
    }
  }
  out += '"';
}

void append_metadata(std::string& out, const char* what, int pid, int tid, const char* key,
                     const std::string& value, bool quoted) {
  out += "{\"name\":\"";
  out += what;
  out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"" + key + "\":";
  if (quoted)
    append_json_string(out, value.c_str());
  else
    out += value;
  out += "}},\n";
}

}  // namespace

Timeline::Timeline(bool enabled, int rank, size_t max_events_per_thread)
    : enabled_(enabled), rank_(rank), max_events_per_thread_(max_events_per_thread) {
  for (int t = 0; t < kMaxThreads; ++t) thread_names_[t] = "thread " + std::to_string(t);
  thread_names_[kComputeThread] = "compute";
  thread_names_[kCommThread] = "comm";
  if (!enabled_) return;
  // The whole capacity up front: the buffers never move, and the pages are only address space
  // until a span first touches them (64 spans a page).
  buffers_[kComputeThread].reserve(max_events_per_thread_);
  buffers_[kCommThread].reserve(max_events_per_thread_);
}

double Timeline::now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void Timeline::span(const char* name, const char* category, double t0_s, double t1_s, int thread_id,
                    TraceArg a, TraceArg b) {
  if (!enabled_) return;
  RT_CHECK(thread_id >= 0 && thread_id < kMaxThreads, "timeline thread id ", thread_id,
           " is outside 0..", kMaxThreads - 1);
  auto& buffer = buffers_[thread_id];
  if (buffer.size() >= max_events_per_thread_) {
    ++dropped_[thread_id];
    return;
  }
  buffer.push_back(Event{name, category, t0_s, t1_s, a, b});
}

const char* Timeline::intern(const std::string& text) {
  std::lock_guard<std::mutex> lock(intern_mutex_);
  return interned_.insert(text).first->c_str();
}

void Timeline::name_thread(int thread_id, const std::string& name) {
  RT_CHECK(thread_id >= 0 && thread_id < kMaxThreads, "timeline thread id ", thread_id,
           " is outside 0..", kMaxThreads - 1);
  thread_names_[thread_id] = name;
}

size_t Timeline::event_count() const {
  size_t n = 0;
  for (const auto& buffer : buffers_) n += buffer.size();
  return n;
}

size_t Timeline::dropped_count() const {
  size_t n = 0;
  for (size_t d : dropped_) n += d;
  return n;
}

// This rank's part of the traceEvents array: metadata first, then one "X" event per span,
// each line ending in ",\n". shift_s maps a local steady-clock time to trace seconds.
std::string Timeline::format_events(double shift_s) const {
  std::string out;
  out.reserve(256 + event_count() * 128);
  append_metadata(out, "process_name", rank_, 0, "name", "rank " + std::to_string(rank_), true);
  append_metadata(out, "process_sort_index", rank_, 0, "sort_index", std::to_string(rank_), false);
  if (dropped_count() > 0)
    append_metadata(out, "process_labels", rank_, 0, "labels",
                    "dropped " + std::to_string(dropped_count()) + " spans (buffer full)", true);
  for (int tid = 0; tid < kMaxThreads; ++tid) {
    if (buffers_[tid].empty() && tid != kComputeThread && tid != kCommThread) continue;
    append_metadata(out, "thread_name", rank_, tid, "name", thread_names_[tid], true);
    append_metadata(out, "thread_sort_index", rank_, tid, "sort_index", std::to_string(tid), false);
  }
  char number[96];
  for (int tid = 0; tid < kMaxThreads; ++tid) {
    for (const Event& e : buffers_[tid]) {
      out += "{\"name\":";
      append_json_string(out, e.name);
      out += ",\"cat\":";
      append_json_string(out, e.category);
      std::snprintf(number, sizeof number,
                    ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", rank_, tid,
                    (e.t0_s + shift_s) * 1e6, std::max(0.0, e.t1_s - e.t0_s) * 1e6);
      out += number;
      if (e.a.key || e.b.key) {
        out += ",\"args\":{";
        for (const TraceArg* arg : {&e.a, &e.b}) {
          if (!arg->key) continue;
          if (out.back() != '{') out += ',';
          append_json_string(out, arg->key);
          out += ':' + std::to_string(arg->value);
        }
        out += '}';
      }
      out += "},\n";
    }
  }
  return out;
}

}  // namespace ringtrain::comm::fusion
