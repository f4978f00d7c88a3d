// communicator.hpp — MPI start-up and shutdown, ranks and nodes, the CPU thread share, and
// the few checked collectives the trainer and the results writer need (they never call MPI).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: OpenMPI's C++ bindings warn under -Wextra
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/comm/mpi_check.hpp"
#include "ringtrain/comm/stall_watch.hpp"

namespace ringtrain::comm {

struct CommunicatorOptions {
  // 0: a node is what MPI_Comm_split_type(SHARED) says. N > 0: "nodes" of N consecutive
  // ranks, to test node-aware algorithms on one machine.
  int ranks_per_node = 0;
};

// Initialises MPI with MPI_THREAD_MULTIPLE (the fusion engine's thread calls MPI) unless it
// is already initialised, and finalises it on destruction when it initialised it.
// Every method that says "collective" must be called by every rank, one thread at a time.
class Communicator {
 public:
  explicit Communicator(const CommunicatorOptions& options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  int node_index() const { return node_index_; }  // 0..node_count-1
  int ranks_per_node_override() const { return ranks_per_node_; }
  const std::string& hostname() const { return hostname_; }
  // World ranks in ring order: by node, then by local rank, so ring neighbours share a node.
  const std::vector<int>& ring_order() const { return ring_order_; }

  // Compute threads this rank should run, and a one-line reason (see cpu_share.hpp).
  int cpu_threads_per_rank() const { return cpu_threads_; }
  const std::string& cpu_threads_description() const { return cpu_description_; }

  // Collective: regroups ranks into "nodes" of ranks_per_node consecutive ranks (0 = real).
  void split_nodes(int ranks_per_node);

  // The watchdog told about each of the collectives below (null: none); it must outlive its
  // registration (the trainer clears it before the watchdog goes).
  void set_stall_watch(StallWatch* watch) const { watch_ = watch; }

  // Collectives, all checked, and watched by the stall watch when one is set.
  void barrier() const;
  bool all_ok(bool mine) const;  // logical AND over ranks: lets every rank fail together
  void allreduce_sum(double* values, size_t n) const;
  // Element-wise maximum over ranks; max(~x) is ~min(x), so one call gives both ends of a range.
  void allreduce_max(uint64_t* values, size_t n) const;
  // Every rank passes the same number of values; the root gets size()*n (rank-major), the
  // others an empty vector.
  std::vector<double> gather_to_root(const std::vector<double>& mine) const;
  std::vector<std::string> gather_strings_to_root(const std::string& mine) const;
  // Every rank's values on every rank, rank-major (size()*n); every rank passes n values.
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) const;
  // The root's bytes on every rank; receivers are resized.
  void broadcast(std::vector<uint8_t>& bytes, int root) const;
  [[noreturn]] void abort(int code) const;

  // For code inside comm/ only: this object's duplicate of MPI_COMM_WORLD, and its node group.
  MPI_Comm raw() const { return world_.get(); }
  MPI_Comm local_raw() const { return local_.get(); }

 private:
  // Owns MPI itself; first member, so it is finalised after every communicator is freed.
  struct Session {
    Session();
    ~Session();
    bool owns_mpi = false;
    int thread_level = MPI_THREAD_SINGLE;
  };
  void find_cpu_share();
  mutable StallWatch* watch_ = nullptr;

  Session session_;
  CommHandle world_;
  CommHandle local_;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  int node_count_ = 1, node_index_ = 0;
  int ranks_per_node_ = 0;
  std::string hostname_;
  std::vector<int> ring_order_;
  int cpu_threads_ = 1;
  std::string cpu_description_;
};

}  // namespace ringtrain::comm
