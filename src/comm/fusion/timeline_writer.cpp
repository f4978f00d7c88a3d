// timeline_writer.cpp — the collective Chrome-trace writer: every rank's spans on rank 0's
// clock, gathered into one file that rank 0 writes atomically.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "ringtrain/build_config.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion/timeline.hpp"
#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::fusion {
namespace {

constexpr size_t kChunkBytes = size_t(1) << 30;  // MPI counts are int: send text in chunks
constexpr int kTagSize = 7101;
constexpr int kTagText = 7102;

void send_text(const std::string& text, MPI_Comm comm) {
  uint64_t size = text.size();
  MPI_CHECK(MPI_Send(&size, 1, MPI_UINT64_T, 0, kTagSize, comm));
  for (size_t sent = 0; sent < text.size(); sent += kChunkBytes) {
    int count = int(std::min(kChunkBytes, text.size() - sent));
    MPI_CHECK(MPI_Send(text.data() + sent, count, MPI_CHAR, 0, kTagText, comm));
  }
}

// Receives one rank's text and appends it to file (or drops it when file is null, so a rank 0
// that failed to open the file still drains every sender and nobody hangs).
void receive_text_into(std::FILE* file, int from, MPI_Comm comm, bool& write_ok) {
  uint64_t size = 0;
  MPI_CHECK(MPI_Recv(&size, 1, MPI_UINT64_T, from, kTagSize, comm, MPI_STATUS_IGNORE));
  std::vector<char> chunk(std::min<uint64_t>(size, kChunkBytes));
  for (uint64_t got = 0; got < size; got += chunk.size()) {
    int count = int(std::min<uint64_t>(kChunkBytes, size - got));
    MPI_CHECK(MPI_Recv(chunk.data(), count, MPI_CHAR, from, kTagText, comm, MPI_STATUS_IGNORE));
    if (file && std::fwrite(chunk.data(), 1, size_t(count), file) != size_t(count))
      write_ok = false;
  }
}

}  // namespace

void Timeline::write_chrome_trace(const Communicator& communicator, const std::string& path) const {
  if (!enabled_) return;
  // A duplicate, so our point-to-point text transfer can never match a message the caller
  // has in flight.
  const CommHandle handle = duplicate(communicator.raw());
  const MPI_Comm comm = handle.get();
  const int me = communicator.rank(), world = communicator.size();

  // Steady clocks of different hosts have different origins: align every rank to rank 0's
  // clock at the moment all leave a barrier (good to the barrier's skew, microseconds here).
  MPI_CHECK(MPI_Barrier(comm));
  double local_sync = now(), root_sync = local_sync;
  MPI_CHECK(MPI_Bcast(&root_sync, 1, MPI_DOUBLE, 0, comm));
  double to_root = root_sync - local_sync;
  double first = std::numeric_limits<double>::infinity();
  for (const auto& buffer : buffers_)
    for (const Event& e : buffer) first = std::min(first, e.t0_s + to_root);
  double origin = first;
  MPI_CHECK(MPI_Allreduce(&first, &origin, 1, MPI_DOUBLE, MPI_MIN, comm));
  if (origin == std::numeric_limits<double>::infinity()) origin = root_sync;
  std::string text = format_events(to_root - origin);

  if (me != 0) {
    send_text(text, comm);
  } else {
    std::string error;
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    AtomicWrite out(path);
    const std::string& temp = out.temp_path();
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
      try {
        if (error.empty()) out.commit();
      } catch (const Error& e) {
        error = e.what();
      }
    }
    text = error;
  }
  // Every rank learns rank 0's outcome, so a failed write is an error everywhere.
  if (me != 0) text.clear();
  broadcast_bytes(comm, text, 0);
  if (!text.empty()) throw Error(str("timeline: rank 0: ", text));
}

}  // namespace ringtrain::comm::fusion
