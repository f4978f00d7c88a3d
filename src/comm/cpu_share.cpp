// cpu_share.cpp — the node's usable CPUs and the per-rank thread count, from affinity masks,
// cgroup limits, OMP_NUM_THREADS and OMP_THREAD_LIMIT.
#include "ringtrain/comm/cpu_share.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {
namespace {

std::string cgroup_text(double cpus) {
  return cpus > 0 ? str(cpus, " CPUs") : std::string("none");
}

// The leading positive integer of OMP_NUM_THREADS ("4" or the outer level of "4,2") or of
// SLURM_CPUS_PER_TASK ("4"), or 0.
int parse_omp_threads(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 6) return 0;
  if (digits < text.size() && text[digits] != ',') return 0;
  return std::stoi(text.substr(0, digits));
}

// cpu.max holds "max 100000" or "<quota> <period>".
double read_cgroup_v2(const std::string& path) {
  std::ifstream in(path);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  return std::stod(quota) / period;
}

double read_cgroup_v1(const std::string& dir) {
  std::ifstream quota_in(dir + "/cpu.cfs_quota_us"), period_in(dir + "/cpu.cfs_period_us");
  double quota = -1, period = 0;
  if (!(quota_in >> quota) || !(period_in >> period) || quota <= 0 || period <= 0) return 0;
  return quota / period;
}

// This process's cgroup v2 path from /proc/self/cgroup ("0::/some/path"), or "".
std::string own_cgroup_v2_path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

}  // namespace

int usable_node_cpus(const CpuFacts& facts) {
  int usable = std::max(1, facts.node_affinity_cpus);
  if (facts.cgroup_cpus > 0)
    usable = std::min(usable, std::max(1, static_cast<int>(std::floor(facts.cgroup_cpus))));
  return usable;
}

namespace {

// The thread count from OMP_NUM_THREADS or the node's share, before OMP_THREAD_LIMIT.
CpuShare uncapped_cpu_share(const CpuFacts& facts) {
  CpuShare share;
  const int own = std::max(1, facts.own_affinity_cpus);
  if (facts.omp_num_threads) {
    const int asked = parse_omp_threads(*facts.omp_num_threads);
    if (asked > 0) {
      share.threads = asked;
      share.description =
          str(asked, " threads per rank: from OMP_NUM_THREADS=", *facts.omp_num_threads,
              " (affinity mask holds ", own, " CPUs)");
      if (asked > own)
        share.warning =
            str("OMP_NUM_THREADS=", *facts.omp_num_threads, " asks for more threads than the ", own,
                " CPU(s) in this rank's affinity mask; threads will share cores. "
                "HINT: mpirun --map-by slot:PE=",
                asked, " (or srun --cpus-per-task=", asked, "), or unset OMP_NUM_THREADS");
      return share;
    }
    share.warning =
        str("OMP_NUM_THREADS=", *facts.omp_num_threads, " is not a positive thread count; ignored");
  }
  const int usable = usable_node_cpus(facts);
  const int local = std::max(1, facts.local_ranks);
  share.threads = std::min(own, std::max(1, usable / local));
  share.description =
      str(share.threads, " thread", share.threads == 1 ? "" : "s", " per rank: ", usable,
          " usable cores (node affinity ", facts.node_affinity_cpus, ", cgroup limit ",
          cgroup_text(facts.cgroup_cpus), ") / ", local, " rank", local == 1 ? "" : "s",
          " on this node; this rank's mask holds ", own);
  if (facts.slurm_cpus) {
    // The allocation's own count: a task Slurm did not bind sees the whole node's mask.
    const int allocated = parse_omp_threads(*facts.slurm_cpus);
    if (allocated > 0 && allocated < share.threads) {
      share.threads = allocated;
      share.description = str(allocated, " thread", allocated == 1 ? "" : "s",
                              " per rank: SLURM_CPUS_PER_TASK=", allocated, " (", usable,
                              " usable cores / ", local, " rank", local == 1 ? "" : "s",
                              " on this node would give more; this rank's mask holds ", own, ")");
    }
  }
  return share;
}

}  // namespace

CpuShare compute_cpu_share(const CpuFacts& facts) {
  CpuShare share = uncapped_cpu_share(facts);
  const int limit = facts.omp_thread_limit;
  if (limit <= 0 || share.threads <= limit) return share;
  if (facts.omp_num_threads && parse_omp_threads(*facts.omp_num_threads) > 0)
    share.warning = str("OMP_NUM_THREADS=", *facts.omp_num_threads, " asks for more threads than ",
                        "OMP_THREAD_LIMIT=", limit, " lets OpenMP start; running ", limit);
  share.description =
      str(limit, " thread", limit == 1 ? "" : "s", " per rank: OMP_THREAD_LIMIT=", limit,
          " (without it: ", share.description, ")");
  share.threads = limit;
  return share;
}

CpuFacts gather_cpu_facts(MPI_Comm node_comm) {
  CpuFacts facts;
  MPI_CHECK(MPI_Comm_size(node_comm, &facts.local_ranks));
  cpu_set_t mask;
  CPU_ZERO(&mask);
  sched_getaffinity(0, sizeof mask, &mask);
  facts.own_affinity_cpus = std::max(1, CPU_COUNT(&mask));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &mask, int(sizeof mask), MPI_BYTE, MPI_BOR, node_comm));
  facts.node_affinity_cpus = std::max(1, CPU_COUNT(&mask));
  // The lowest limit (none counts as the highest), so every rank of the node takes one answer.
  const double own = cgroup_cpu_limit();
  double lowest = own > 0 ? own : std::numeric_limits<double>::infinity();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_DOUBLE, MPI_MIN, node_comm));
  facts.cgroup_cpus = std::isinf(lowest) ? 0 : lowest;
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) facts.omp_num_threads = omp;
  if (const char* cpt = std::getenv("SLURM_CPUS_PER_TASK")) facts.slurm_cpus = cpt;
  // OpenMP's own reading of OMP_THREAD_LIMIT (the largest int when unset or not a count), the
  // one the backends' OpenMP regions obey.
  const int limit = omp_get_thread_limit();
  facts.omp_thread_limit = limit < std::numeric_limits<int>::max() ? limit : 0;
  return facts;
}

int own_affinity_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 1;
  return std::max(1, CPU_COUNT(&mask));
}

double cgroup_cpu_limit() {
  const std::string own = own_cgroup_v2_path();
  if (!own.empty() && own != "/") {
    if (double cpus = read_cgroup_v2("/sys/fs/cgroup" + own + "/cpu.max"); cpus > 0) return cpus;
  }
  if (double cpus = read_cgroup_v2("/sys/fs/cgroup/cpu.max"); cpus > 0) return cpus;
  for (const char* dir : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
    if (double cpus = read_cgroup_v1(dir); cpus > 0) return cpus;
  return 0;
}

}  // namespace ringtrain::comm
