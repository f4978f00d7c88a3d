// log.hpp — rank-aware logging: rank 0 prints progress; every rank prints its own errors.
#pragma once

#include <string>

namespace ringtrain::log {

// Set once by the communicator; until then the process counts as rank 0 of 1.
void set_rank(int rank, int world_size);
int rank();
int world_size();
bool is_root();

// Rank 0 only, to stdout.
void info(const std::string& line);
// Every rank, to stderr, prefixed "ringtrain: warning: " (and the rank when world > 1).
void warn(const std::string& line);
// Every rank, to stderr, prefixed "ringtrain: error: " (and the rank when world > 1).
void error(const std::string& line);
// An error that holds for the ranks the line itself names (or all): no rank prefix.
void error_for_ranks(const std::string& line);

// True when stdout is a terminal, so progress may redraw with '\r'.
bool stdout_is_tty();

}  // namespace ringtrain::log
