// bench.cpp — /proc/stat and getrusage for the CPU others took, the benchmarks' command line
// and their exit codes.
#include "bench.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "ringtrain/core/error.hpp"

namespace po = boost::program_options;

namespace ringtrain::bench {

CpuTimes cpu_times() {
  CpuTimes t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) {
    const double hz = double(sysconf(_SC_CLK_TCK));
    t.machine_busy_s = (user + nice + system + irq + softirq + steal) / hz;
    t.machine_total_s = t.machine_busy_s + (idle + iowait) / hz;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  t.own_s = double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
            1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  return t;
}

double OtherCpu::cores(double wall_s) const {
  const CpuTimes now = cpu_times();
  const double others = (now.machine_busy_s - start_.machine_busy_s) - (now.own_s - start_.own_s);
  return wall_s > 0 ? std::max(0.0, others) / wall_s : 0;
}

double OtherCpu::fraction(double own_s) const {
  const CpuTimes now = cpu_times();
  const double total = now.machine_total_s - start_.machine_total_s;
  if (total <= 0) return 0;
  return std::max(0.0, (now.machine_busy_s - start_.machine_busy_s) - own_s) / total;
}

bool parse_command_line(int argc, char** argv, const po::options_description& desc,
                        po::variables_map& vm, const std::string& usage,
                        const po::positional_options_description* positional, bool speaks) {
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      if (speaks) std::cout << usage << "\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(str(e.what(), " (see --help)"));
  }
  return true;
}

int run_bench(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return kExitFailure;
  }
}

}  // namespace ringtrain::bench
