// cpu_share.hpp — how many CPUs this node's ranks may use, and one rank's share of them as
// compute threads.
//
// Usable CPUs are the union of the affinity masks of the ranks on this node, capped by the
// cgroup CPU limit rounded down; each local rank gets an equal share (at least 1), never more
// than its own mask holds, nor more than Slurm's --cpus-per-task (SLURM_CPUS_PER_TASK) where
// Slurm did not bind the task (task/none, --cpu-bind=none): the mask then spans CPUs other jobs
// were given. OMP_NUM_THREADS, when set, wins, with a warning when it oversubscribes the mask.
// OMP_THREAD_LIMIT caps either answer: OpenMP never starts more threads than that in a region,
// and a backend asked for more would wait for threads that never come.
// The shared-memory wait style (shm/wait_style.hpp) starts from the same count of usable CPUs.
#pragma once

#include <optional>
#include <string>

#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm

namespace ringtrain::comm {

struct CpuFacts {
  int own_affinity_cpus = 1;                   // sched_getaffinity of this rank
  int node_affinity_cpus = 1;                  // union of the masks of every rank on this node
  double cgroup_cpus = 0;                      // cpu.max quota / period; 0 = no limit
  int local_ranks = 1;                         // ranks sharing this node
  std::optional<std::string> omp_num_threads;  // the environment variable, when set
  std::optional<std::string> slurm_cpus;       // SLURM_CPUS_PER_TASK, when set
  int omp_thread_limit = 0;                    // OMP_THREAD_LIMIT as OpenMP took it; 0 = none
};

struct CpuShare {
  int threads = 1;
  std::string description;  // one line: the number and why
  std::string warning;      // empty unless the user's setting is doubtful
};

// How many CPUs this node's ranks may use: the union of their masks, capped by the cgroup limit
// rounded down (a 1.5-CPU quota is one CPU's worth that two busy ranks can count on, not two),
// at least 1. The one answer both the thread count and the wait style take.
int usable_node_cpus(const CpuFacts& facts);

CpuShare compute_cpu_share(const CpuFacts& facts);

// Collective over node_comm (the ranks of one node): this rank's facts, the node's the same on
// every rank of it (the union of the masks; the lowest cgroup limit among them).
CpuFacts gather_cpu_facts(MPI_Comm node_comm);

// This process's sched_getaffinity CPU count (at least 1).
int own_affinity_cpus();
// The cgroup v2 cpu.max limit (v1 cfs quota as fallback) in CPUs; 0 when unlimited or unknown.
double cgroup_cpu_limit();

}  // namespace ringtrain::comm
