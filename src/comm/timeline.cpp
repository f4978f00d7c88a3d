// timeline.cpp — span recording and the collective Chrome-trace writer.
#include "ringtrain/comm/timeline.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "ringtrain/build_config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {
namespace {

constexpr size_t kChunkBytes = size_t(1) << 30;  // MPI counts are int: send text in chunks
constexpr int kTagSize = 7101;
constexpr int kTagText = 7102;

// Throws ringtrain::Error with MPI's own text when an MPI call fails.
void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(str("timeline: ", call, " failed: ", std::string(text, size_t(length))));
}
#define TIMELINE_MPI(call) check_mpi((call), #call)

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

// A duplicate of the caller's communicator, so our point-to-point text transfer can never
// match a message the caller has in flight.
class DupComm {
 public:
  explicit DupComm(MPI_Comm comm) { TIMELINE_MPI(MPI_Comm_dup(comm, &comm_)); }
  ~DupComm() { MPI_Comm_free(&comm_); }
  DupComm(const DupComm&) = delete;
  DupComm& operator=(const DupComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

void send_text(const std::string& text, MPI_Comm comm) {
  uint64_t size = text.size();
  TIMELINE_MPI(MPI_Send(&size, 1, MPI_UINT64_T, 0, kTagSize, comm));
  for (size_t sent = 0; sent < text.size(); sent += kChunkBytes) {
    int count = int(std::min(kChunkBytes, text.size() - sent));
    TIMELINE_MPI(MPI_Send(text.data() + sent, count, MPI_CHAR, 0, kTagText, comm));
  }
}

// Receives one rank's text and appends it to file (or drops it when file is null, so a rank 0
// that failed to open the file still drains every sender and nobody hangs).
void receive_text_into(std::FILE* file, int from, MPI_Comm comm, bool& write_ok) {
  uint64_t size = 0;
  TIMELINE_MPI(MPI_Recv(&size, 1, MPI_UINT64_T, from, kTagSize, comm, MPI_STATUS_IGNORE));
  std::vector<char> chunk(std::min<uint64_t>(size, kChunkBytes));
  for (uint64_t got = 0; got < size; got += chunk.size()) {
    int count = int(std::min<uint64_t>(kChunkBytes, size - got));
    TIMELINE_MPI(MPI_Recv(chunk.data(), count, MPI_CHAR, from, kTagText, comm, MPI_STATUS_IGNORE));
    if (file && std::fwrite(chunk.data(), 1, size_t(count), file) != size_t(count))
      write_ok = false;
  }
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

void Timeline::write_chrome_trace(MPI_Comm user_comm, const std::string& path) const {
  if (!enabled_) return;
  DupComm dup(user_comm);
  MPI_Comm comm = dup.get();
  int me = 0, world = 1;
  TIMELINE_MPI(MPI_Comm_rank(comm, &me));
  TIMELINE_MPI(MPI_Comm_size(comm, &world));

  // Steady clocks of different hosts have different origins: align every rank to rank 0's
  // clock at the moment all leave a barrier (good to the barrier's skew, microseconds here).
  TIMELINE_MPI(MPI_Barrier(comm));
  double local_sync = now(), root_sync = local_sync;
  TIMELINE_MPI(MPI_Bcast(&root_sync, 1, MPI_DOUBLE, 0, comm));
  double to_root = root_sync - local_sync;
  double first = std::numeric_limits<double>::infinity();
  for (const auto& buffer : buffers_)
    for (const Event& e : buffer) first = std::min(first, e.t0_s + to_root);
  double origin = first;
  TIMELINE_MPI(MPI_Allreduce(&first, &origin, 1, MPI_DOUBLE, MPI_MIN, comm));
  if (origin == std::numeric_limits<double>::infinity()) origin = root_sync;
  std::string text = format_events(to_root - origin);

  if (me != 0) {
    send_text(text, comm);
  } else {
    std::string error;
    std::string temp = path + ".tmp." + std::to_string(getpid());
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::FILE* file = std::fopen(temp.c_str(), "wb");
    if (!file) error = str("cannot create ", temp, ": ", std::strerror(errno));
    bool write_ok = true;
    auto put = [&](const std::string& s) {
      if (file && std::fwrite(s.data(), 1, s.size(), file) != s.size()) write_ok = false;
    };
    put(str("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"program\":\"ringtrain ",
            RINGTRAIN_VERSION, "\",\"world_size\":", world,
            ",\"clock\":\"steady, aligned to rank 0 at a barrier\"},"
            "\n\"traceEvents\":[\n"));
    put(text);
    for (int r = 1; r < world; ++r) receive_text_into(file, r, comm, write_ok);
    // Every part ends in ",\n": close the array with an event that needs no comma after it.
    put("{\"name\":\"trace end\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{}}\n]}\n");
    if (file) {
      if (std::fclose(file) != 0) write_ok = false;
      if (!write_ok && error.empty())
        error = str("cannot write ", temp, ": ", std::strerror(errno));
      if (error.empty() && std::rename(temp.c_str(), path.c_str()) != 0)
        error = str("cannot rename ", temp, " to ", path, ": ", std::strerror(errno));
      if (!error.empty()) std::remove(temp.c_str());
    }
    text = error;
  }
  // Every rank learns rank 0's outcome, so a failed write is an error everywhere.
  uint64_t error_size = me == 0 ? text.size() : 0;
  TIMELINE_MPI(MPI_Bcast(&error_size, 1, MPI_UINT64_T, 0, comm));
  if (error_size == 0) return;
  std::string error(error_size, '\0');
  if (me == 0) error = text;
  TIMELINE_MPI(MPI_Bcast(error.data(), int(error_size), MPI_CHAR, 0, comm));
  throw Error(str("timeline: rank 0: ", error));
}

}  // namespace ringtrain::comm
