// cpu_share.hpp — how many compute threads one rank should run: its share of the usable cores.
//
// Usable cores are the union of the affinity masks of the ranks on this node, capped by the
// cgroup CPU limit; each local rank gets an equal share (at least 1), never more than its own
// mask holds, nor more than Slurm's --cpus-per-task (SLURM_CPUS_PER_TASK) where Slurm did not
// bind the task (task/none, --cpu-bind=none): the mask then spans CPUs other jobs were given.
// OMP_NUM_THREADS, when set, wins, with a warning when it oversubscribes the mask.
#pragma once

#include <optional>
#include <string>

namespace ringtrain::comm {

struct CpuFacts {
  int own_affinity_cpus = 1;                   // sched_getaffinity of this rank
  int node_affinity_cpus = 1;                  // union of the masks of every rank on this node
  double cgroup_cpus = 0;                      // cpu.max quota / period; 0 = no limit
  int local_ranks = 1;                         // ranks sharing this node
  std::optional<std::string> omp_num_threads;  // the environment variable, when set
  std::optional<std::string> slurm_cpus;       // SLURM_CPUS_PER_TASK, when set
};

struct CpuShare {
  int threads = 1;
  std::string description;  // one line: the number and why
  std::string warning;      // empty unless the user's setting is doubtful
};

CpuShare compute_cpu_share(const CpuFacts& facts);

// This process's sched_getaffinity CPU count (at least 1).
int own_affinity_cpus();
// The cgroup v2 cpu.max limit (v1 cfs quota as fallback) in CPUs; 0 when unlimited or unknown.
double cgroup_cpu_limit();

}  // namespace ringtrain::comm
