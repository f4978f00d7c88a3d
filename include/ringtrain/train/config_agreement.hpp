// config_agreement.hpp — one job, one configuration: at start every rank compares what it
// parsed (the effective deck, the build) with rank 0's, before any data is read or memory taken.
#pragma once

#include <string>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"

namespace ringtrain::train {

// What one rank made of its command line.
struct StartRequest {
  enum Kind { kTrain, kPrint, kBadInput } kind = kTrain;
  Config config;     // kTrain
  std::string text;  // kPrint: what to print (--help, --print-deck); kBadInput: the error line
};

// The text every rank must share to go on: the build (build_identity), whether it only prints,
// and agreed_config_text(); one "key = value" line each.
std::string start_text(const StartRequest& request);

// Collective, once, right after parsing: whether every rank parsed its command line, then
// start_text compared with rank 0's (comm::disagreement_on_keys: a fingerprint decides; only on
// a mismatch does rank 0 send its text and the first differing rank find its first key). Returns -1
// when every rank trains, else the exit code every rank takes: 0 when every rank only prints (rank
// 0 printed), 2 after rank 0 printed one line: a parse error (as it is when every rank has it, else
// naming the ranks that have it), or "ranks disagree on KEY: rank R has A, rank 0 has B (every rank
// must read the same deck)".
int agree_on_start(const comm::Communicator& comm, const StartRequest& mine);

}  // namespace ringtrain::train
