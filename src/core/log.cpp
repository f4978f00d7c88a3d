// log.cpp — rank-aware logging to stdout (rank 0) and stderr (any rank).
#include "ringtrain/core/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace ringtrain::log {
namespace {
int g_rank = 0;
int g_world = 1;
std::mutex g_mutex;

void to_stderr(const char* kind, const std::string& line, bool with_rank = true) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1 && with_rank)
    std::fprintf(stderr, "ringtrain: %s: rank %d: %s\n", kind, g_rank, line.c_str());
  else
    std::fprintf(stderr, "ringtrain: %s: %s\n", kind, line.c_str());
  std::fflush(stderr);
}
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() {
  return g_rank;
}
int world_size() {
  return g_world;
}
bool is_root() {
  return g_rank == 0;
}

void info(const std::string& line) {
  if (g_rank != 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void warn(const std::string& line) {
  to_stderr("warning", line);
}
void error(const std::string& line) {
  to_stderr("error", line);
}
void error_for_ranks(const std::string& line) {
  to_stderr("error", line, false);
}

bool stdout_is_tty() {
  return isatty(fileno(stdout)) != 0;
}

}  // namespace ringtrain::log
