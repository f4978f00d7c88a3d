// bench.hpp — what every rt-*-bench shares, as nccl-tests' benchmarks share one driver: the
// median (core/timer.hpp), the CPU other processes took while a measurement ran (from
// /proc/stat), and the command line (Boost.Program_options, --help, one error line).
//
// defines: CpuTimes, cpu_times(), OtherCpu, parse_command_line(), run_bench()
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <string>

#include "ringtrain/core/timer.hpp"  // median()

namespace ringtrain::bench {

// The machine's CPU time from /proc/stat (every core, every process: busy and in all) and this
// process's own (getrusage), in CPU seconds.
struct CpuTimes {
  double machine_busy_s = 0, machine_total_s = 0, own_s = 0;
};
CpuTimes cpu_times();

// The CPU time processes other than this one took since construction: a benchmark marks rows
// taken on a busy machine (these machines are shared).
class OtherCpu {
 public:
  OtherCpu() : start_(cpu_times()) {}
  // Their CPU seconds per wall second: the cores they kept busy meanwhile.
  double cores(double wall_s) const;
  // Their share of all the machine's CPU time meanwhile (0..1); `own_s` replaces this process's
  // own CPU seconds when more processes are ours (the ranks of a node).
  double fraction(double own_s) const;
  double own_seconds() const { return cpu_times().own_s - start_.own_s; }

 private:
  CpuTimes start_;
};

// Parses argv by `desc` (named options; `positional` names options taken by position, for
// the tools that took them so). False after --help (printed with `usage` where `speaks`: rank
// 0 of an MPI benchmark): exit 0. A bad option throws InputError: Boost's words, "(see --help)".
bool parse_command_line(
    int argc, char** argv, const boost::program_options::options_description& desc,
    boost::program_options::variables_map& vm, const std::string& usage,
    const boost::program_options::positional_options_description* positional = nullptr,
    bool speaks = true);

// Runs a benchmark's body and turns what escapes it into one line on stderr and the exit code:
// "TOOL: error: MESSAGE", and 2 for bad input (an InputError), 1 for anything else.
int run_bench(const char* tool, const std::function<int()>& body);

}  // namespace ringtrain::bench
