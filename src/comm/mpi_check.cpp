// mpi_check.cpp — MPI's error text, the MPI_CHECK error path, owned and duplicated
// communicators, the node split and the byte broadcast.
#include "ringtrain/comm/mpi_check.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void abort_job(MPI_Comm comm, int code) {
  // MPI_Abort asks the launcher to kill the job; across a dead link that request never
  // arrives and the call may never return. The watch thread ends this process regardless.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
    std::_Exit(code);
  }).detach();
  MPI_Abort(comm, code);
  std::_Exit(code);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str("MPI error code ", code);
  return std::string(text, length);
}

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  int rank = -1, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !mpi_finalized()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw Error(str(call, " failed on rank ", rank, " (host ", this_host(), ") at ", file, ":", line,
                  ": ", mpi_error_text(code)));
}

void CommHandle::reset() noexcept {
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

CommHandle split_shared_memory(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  return CommHandle(node);
}

uint64_t broadcast_size(MPI_Comm comm, uint64_t size, int root) {
  MPI_CHECK(MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm));
  return size;
}

void broadcast_raw(MPI_Comm comm, void* data, size_t size, int root) {
  auto* bytes = static_cast<char*>(data);
  for (size_t done = 0; done < size; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min<size_t>(kMaxMpiPiece, size - done));
    MPI_CHECK(MPI_Bcast(bytes + done, piece, MPI_BYTE, root, comm));
  }
}

CommHandle duplicate(MPI_Comm comm) {
  MPI_Comm copy = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(comm, &copy));
  CommHandle handle(copy);
  MPI_CHECK(MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN));
  return handle;
}

}  // namespace ringtrain::comm
