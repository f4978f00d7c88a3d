// fail_together.hpp — run a phase on every rank and fail together: no rank hangs waiting for one
// that threw. (Not the agreement on what ranks hold alike: that is comm/agreement.hpp.)
#pragma once

#include <exception>
#include <functional>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

// Thrown on every rank when some rank failed an agreed phase; the message has been
// printed, so main exits with `code` and says nothing more.
class PeerFailed : public std::exception {
 public:
  explicit PeerFailed(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "another rank failed"; }

 private:
  int code_;
};

// Collective. Runs phase(); if it throws on any rank, rank 0 prints each distinct message
// once with the ranks that raised it ("... (ranks 0-3)"), and every rank throws PeerFailed
// with the exit code the failure deserves (kExitBadInput when every failure was an
// InputError, else kExitFailure).
void fail_together(const comm::Communicator& comm, const std::function<void()>& phase);

// Runs a command's body (training, predict) and turns what escapes it into the exit code: 0;
// PeerFailed's code (already reported); else the error printed on this rank, exit 2 for an
// InputError (bad input found mid-run, e.g. a shard changed under the job) or 1, and with
// more than one rank the job aborted with that code, so no rank waits for this one.
int run_to_exit_code(const comm::Communicator& comm, const std::function<void()>& body);

}  // namespace ringtrain::train
