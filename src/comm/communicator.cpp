// communicator.cpp — MPI session, node discovery, ring order, CPU share, checked collectives.
#include "ringtrain/comm/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <tuple>

#include "ringtrain/comm/cpu_share.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::comm {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

}  // namespace

Communicator::Session::Session() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (mpi_finalized()) throw Error("cannot start MPI: MPI_Finalize was already called");
  if (!initialized) {
    // The fusion thread waits for the ring inside MPI, and OpenMPI waits by polling. With one
    // core per rank that poll shares the core with backprop and takes about half of it;
    // yielding in the poll gives the core back (docs/TUNING.md, "MPI yields when idle").
    // A value set outside wins.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level) != MPI_SUCCESS)
      throw Error(str("MPI_Init_thread failed on host ", this_host()));
    owns_mpi = true;
  } else {
    MPI_Query_thread(&thread_level);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (thread_level < MPI_THREAD_MULTIPLE) {
    if (owns_mpi) MPI_Finalize();
    throw Error(str("MPI granted ", thread_level_name(thread_level),
                    " but ringtrain needs MPI_THREAD_MULTIPLE (its fusion thread calls MPI "
                    "while the main thread runs). HINT: use an MPI built with thread support "
                    "(OpenMPI: --enable-mpi-thread-multiple, the default since 3.0)"));
  }
}

Communicator::Session::~Session() {
  if (owns_mpi && !mpi_finalized()) MPI_Finalize();
}

Communicator::Communicator(const CommunicatorOptions& options)
    : world_(duplicate(MPI_COMM_WORLD)), hostname_(this_host()) {
  MPI_CHECK(MPI_Comm_rank(world_.get(), &rank_));
  MPI_CHECK(MPI_Comm_size(world_.get(), &size_));
  log::set_rank(rank_, size_);
  find_cpu_share();
  split_nodes(options.ranks_per_node);
}

Communicator::~Communicator() = default;

void Communicator::split_nodes(int ranks_per_node) {
  RT_REQUIRE_INPUT(ranks_per_node >= 0, "ranks per node must be >= 0 (0 = real nodes), not ",
                   ranks_per_node);
  MPI_Comm local = MPI_COMM_NULL;
  if (ranks_per_node == 0)
    MPI_CHECK(
        MPI_Comm_split_type(world_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  else
    MPI_CHECK(MPI_Comm_split(world_.get(), rank_ / ranks_per_node, rank_, &local));
  local_ = CommHandle(local);
  MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  ranks_per_node_ = ranks_per_node;

  // A node is named by its leader's world rank; nodes are ordered by that rank.
  int mine[2] = {rank_, local_rank_};
  MPI_CHECK(MPI_Bcast(&mine[0], 1, MPI_INT, 0, local));
  std::vector<int> all(2 * size_);
  MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, world_.get()));
  std::vector<int> leaders;
  for (int r = 0; r < size_; ++r) leaders.push_back(all[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  node_count_ = static_cast<int>(leaders.size());
  node_index_ =
      static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), mine[0]) - leaders.begin());
  ring_order_.resize(size_);
  std::iota(ring_order_.begin(), ring_order_.end(), 0);
  std::stable_sort(ring_order_.begin(), ring_order_.end(), [&](int a, int b) {
    return std::tie(all[2 * a], all[2 * a + 1]) < std::tie(all[2 * b], all[2 * b + 1]);
  });
}

void Communicator::find_cpu_share() {
  // Over the ranks of this (real) node, whatever ranks_per_node emulates.
  CommHandle node = split_shared_memory(world_.get());
  const CpuShare share = compute_cpu_share(gather_cpu_facts(node.get()));
  cpu_threads_ = share.threads;
  cpu_description_ = share.description;
  if (!share.warning.empty()) log::warn(share.warning);
}

void Communicator::barrier() const {
  WatchedCollective watched(watch_);
  MPI_CHECK(MPI_Barrier(world_.get()));
}

bool Communicator::all_ok(bool mine) const {
  WatchedCollective watched(watch_);
  int ok = mine ? 1 : 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, world_.get()));
  return all == 1;
}

void Communicator::allreduce_sum(double* values, size_t n) const {
  WatchedCollective watched(watch_);
  for (size_t done = 0; done < n; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min(kMaxMpiPiece, n - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values + done, piece, MPI_DOUBLE, MPI_SUM, world_.get()));
  }
}

void Communicator::allreduce_max(uint64_t* values, size_t n) const {
  WatchedCollective watched(watch_);
  for (size_t done = 0; done < n; done += kMaxMpiPiece) {
    const int piece = static_cast<int>(std::min(kMaxMpiPiece, n - done));
    MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, values + done, piece, MPI_UINT64_T, MPI_MAX, world_.get()));
  }
}

std::vector<double> Communicator::gather_to_root(const std::vector<double>& mine) const {
  WatchedCollective watched(watch_);
  long long range[2] = {static_cast<long long>(mine.size()), -static_cast<long long>(mine.size())};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, world_.get()));
  if (range[0] != -range[1])
    throw Error(str("gather_to_root: ranks pass different counts (between ", -range[1], " and ",
                    range[0], "); every rank must pass the same number of values"));
  RT_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "gather_to_root: ", mine.size(),
           " values is more than one MPI call can carry");
  std::vector<double> all(rank_ == 0 ? mine.size() * size_ : 0);
  const int n = static_cast<int>(mine.size());
  MPI_CHECK(MPI_Gather(mine.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, 0, world_.get()));
  return all;
}

std::vector<std::string> Communicator::gather_strings_to_root(const std::string& mine) const {
  WatchedCollective watched(watch_);
  RT_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "gather_strings_to_root: string of ",
           mine.size(), " bytes is too long");
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank_ == 0 ? size_ : 0);
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world_.get()));
  std::vector<int> offsets(lengths.size(), 0);
  long long total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += lengths[r];
  }
  RT_CHECK(total <= INT_MAX, "gather_strings_to_root: ", total, " bytes in all is too many");
  std::string joined(static_cast<size_t>(total), '\0');
  MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(),
                        offsets.data(), MPI_CHAR, 0, world_.get()));
  std::vector<std::string> out;
  for (size_t r = 0; r < lengths.size(); ++r) out.push_back(joined.substr(offsets[r], lengths[r]));
  return out;
}

void Communicator::broadcast(std::vector<uint8_t>& bytes, int root) const {
  WatchedCollective watched(watch_);
  RT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of ", size_);
  broadcast_bytes(world_.get(), bytes, root);
}

std::vector<uint64_t> Communicator::allgather(const std::vector<uint64_t>& mine) const {
  WatchedCollective watched(watch_);
  RT_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "allgather: ", mine.size(),
           " values is more than one MPI call can carry");
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(size_));
  const int n = static_cast<int>(mine.size());
  MPI_CHECK(MPI_Allgather(mine.data(), n, MPI_UINT64_T, all.data(), n, MPI_UINT64_T, world_.get()));
  return all;
}

void Communicator::abort(int code) const {
  abort_job(MPI_COMM_WORLD, code);
}

}  // namespace ringtrain::comm
