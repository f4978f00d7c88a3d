// mpi_check.hpp — MPI_CHECK (rank, host, file:line, MPI's own error text), an owning MPI_Comm,
// and the byte broadcast every comm/ module shares.
//
// Only code inside comm/ includes this header: nothing else in ringtrain calls MPI.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: OpenMPI's C++ bindings warn under -Wextra
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ringtrain::comm {

// Largest element count handed to one MPI call (MPI counts are int): longer buffers go in pieces.
constexpr size_t kMaxMpiPiece = size_t(1) << 30;

// This machine's host name, for messages ("unknown-host" when it cannot be read).
std::string this_host();
// True once MPI_Finalize has run: nothing may call MPI any more.
bool mpi_finalized();

// Ends the job: MPI_Abort on comm, and this process exits with code within kAbortGraceSeconds
// even when the abort cannot reach the launcher or the other nodes (a dead link): a rank
// that gives up never stays behind waiting for an abort that will not come.
constexpr int kAbortGraceSeconds = 5;
[[noreturn]] void abort_job(MPI_Comm comm, int code);

// MPI_Error_string of code, or "MPI error code N" when MPI cannot describe it.
std::string mpi_error_text(int code);

// Throws ringtrain::Error: "MPI_Isend(...) failed on rank R (host H) at file:line: <text>".
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

// Owns one communicator created by MPI_Comm_dup/split; frees it unless MPI is finalized.
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(MPI_Comm comm) : comm_(comm) {}
  CommHandle(CommHandle&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  CommHandle& operator=(CommHandle&& other) noexcept {
    CommHandle(std::move(other)).swap(*this);
    return *this;
  }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle() { reset(); }

  MPI_Comm get() const { return comm_; }
  bool valid() const { return comm_ != MPI_COMM_NULL; }
  void reset() noexcept;
  void swap(CommHandle& other) noexcept { std::swap(comm_, other.comm_); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// MPI_Comm_dup of comm with MPI_ERRORS_RETURN set, so every failure reaches MPI_CHECK.
CommHandle duplicate(MPI_Comm comm);

// The ranks of comm that share this node's memory (MPI_COMM_TYPE_SHARED), ordered by their rank
// in comm: where all of comm is on one node, local ranks are comm ranks. Collective.
CommHandle split_shared_memory(MPI_Comm comm);

// Collective: the root's size on every rank of comm.
uint64_t broadcast_size(MPI_Comm comm, uint64_t size, int root);
// Collective: bytes [data, data + size) of the root on every rank, in pieces that MPI's int
// counts can carry.
void broadcast_raw(MPI_Comm comm, void* data, size_t size, int root);

// Collective: the root's bytes (a std::string or std::vector<uint8_t>) on every rank of comm;
// receivers are resized.
template <typename Bytes>
void broadcast_bytes(MPI_Comm comm, Bytes& bytes, int root) {
  bytes.resize(broadcast_size(comm, bytes.size(), root));
  broadcast_raw(comm, bytes.data(), bytes.size(), root);
}

}  // namespace ringtrain::comm

// Checks an MPI call's return code; communicators we use return errors instead of aborting.
#define MPI_CHECK(call)                                                            \
  do {                                                                             \
    const int rt_mpi_code_ = (call);                                               \
    if (rt_mpi_code_ != MPI_SUCCESS)                                               \
      ::ringtrain::comm::throw_mpi_error(rt_mpi_code_, #call, __FILE__, __LINE__); \
  } while (0)
