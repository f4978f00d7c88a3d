// agree.hpp — run a phase on every rank and fail together: no rank hangs waiting for one that threw.
#pragma once

#include <exception>
#include <functional>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

// Thrown on the ranks that did not fail themselves when another rank failed a phase;
// that rank printed the message, so main exits with `code` and says nothing more.
class PeerFailed : public std::exception {
 public:
  explicit PeerFailed(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "another rank failed"; }

 private:
  int code_;
};

// This rank's own failure of an agreed phase: every other rank knows and exits too, so
// main prints the message and exits with code (no abort needed).
class AgreedError : public Error {
 public:
  AgreedError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Collective. Runs phase(); if it throws on any rank, the ranks that threw throw
// AgreedError with their message and the others throw PeerFailed, both with the exit code
// the failure deserves (kExitBadInput when every failure was an InputError, else kExitFailure).
void agree(const comm::Communicator& comm, const std::function<void()>& phase);

}  // namespace ringtrain::train
