// pipeline.hpp — the event loop of a chunked exchange with one neighbour per direction, shared
// by the ring (each phase) and rhd (each partner step).
//
// Post every receive and send the windows allow, then wait for the oldest receive or the
// oldest send, whichever completes first. Never blocking on one kind while the other could
// progress keeps every ring and every pairing free of deadlock; a window bounds the requests
// (and scratch slots) in flight.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/comm/mpi_check.hpp"

namespace ringtrain::comm::allreduce {

// The window for messages that need no scratch slot (fp32 sends, fp32 receives that land in
// place): all of them, but at most kMaxPostedAhead, and never fewer than the K slots: past some
// depth the shared-memory transport stalls on its own queues (docs/TUNING.md, "Sends posted
// ahead").
constexpr int64_t kMaxPostedAhead = 64;
inline int64_t posted_ahead(int64_t messages, int64_t slots) {
  return std::min(messages, std::max(slots, kMaxPostedAhead));
}

struct PipelineShape {
  int64_t recvs = 0, sends = 0;              // messages in each direction
  int64_t recv_window = 1, send_window = 1;  // at most this many posted and not yet done
};

// Where the running pipeline stands, read by a stall report on another thread (relaxed: a
// report, not a synchronisation). completed counts every message of every run: while it moves,
// bytes move, and a wait however long is no stall.
struct PipelineProgress {
  std::atomic<int64_t> recvs_done{0}, sends_done{0}, recvs{0}, sends{0};
  std::atomic<uint64_t> completed{0};
};

// "received R of M messages from rank FROM, sent S of N to rank TO": where a stalled run stands.
std::string wait_text(const PipelineProgress& progress, int from, int to);

// post_recv(m, MPI_Request*) and post_send(m, MPI_Request*) post message m;
// finish_recv(m) consumes receive m once it is complete (in order);
// send_may_go(m, receives_done) says whether send m may be posted yet (a ring forwards what
// an earlier receive brought in). The request vectors grow to the windows and are reused.
// progress, when not null, follows the run.
template <typename PostRecv, typename PostSend, typename FinishRecv, typename SendMayGo>
void run_pipeline(const PipelineShape& shape, std::vector<MPI_Request>& recv_requests,
                  std::vector<MPI_Request>& send_requests, PostRecv&& post_recv,
                  PostSend&& post_send, FinishRecv&& finish_recv, SendMayGo&& send_may_go,
                  PipelineProgress* progress) {
  const int64_t RW = std::max<int64_t>(shape.recv_window, 1);
  const int64_t SW = std::max<int64_t>(shape.send_window, 1);
  if (static_cast<int64_t>(recv_requests.size()) < RW) recv_requests.resize(RW, MPI_REQUEST_NULL);
  if (static_cast<int64_t>(send_requests.size()) < SW) send_requests.resize(SW, MPI_REQUEST_NULL);
  int64_t recv_posted = 0, recv_done = 0, send_posted = 0, send_done = 0;
  auto report = [&] {
    if (!progress) return;
    progress->recvs_done.store(recv_done, std::memory_order_relaxed);
    progress->sends_done.store(send_done, std::memory_order_relaxed);
  };
  if (progress) {
    progress->recvs.store(shape.recvs, std::memory_order_relaxed);
    progress->sends.store(shape.sends, std::memory_order_relaxed);
    report();
  }
  while (recv_done < shape.recvs || send_done < shape.sends) {
    for (; recv_posted < shape.recvs && recv_posted < recv_done + RW; ++recv_posted)
      post_recv(recv_posted, &recv_requests[recv_posted % RW]);
    for (; send_posted < shape.sends && send_posted < send_done + SW &&
           send_may_go(send_posted, recv_done);
         ++send_posted)
      post_send(send_posted, &send_requests[send_posted % SW]);
    MPI_Request* oldest_recv = &recv_requests[recv_done % RW];
    MPI_Request* oldest_send = &send_requests[send_done % SW];
    MPI_Request oldest[2] = {recv_done < recv_posted ? *oldest_recv : MPI_REQUEST_NULL,
                             send_done < send_posted ? *oldest_send : MPI_REQUEST_NULL};
    int which = MPI_UNDEFINED;
    MPI_CHECK(MPI_Waitany(2, oldest, &which, MPI_STATUS_IGNORE));
    if (which == 0) {
      *oldest_recv = MPI_REQUEST_NULL;
      finish_recv(recv_done++);
    } else if (which == 1) {
      *oldest_send = MPI_REQUEST_NULL;
      ++send_done;
    }
    if (progress && which != MPI_UNDEFINED) {
      report();
      progress->completed.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace ringtrain::comm::allreduce
