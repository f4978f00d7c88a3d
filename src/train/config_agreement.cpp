// config_agreement.cpp — the start-up agreement: each rank's effective configuration as
// "key = value" lines, compared with rank 0's by comm/agreement (a fingerprint; on a mismatch
// the first differing key named), after a check that every rank parsed its command line.
#include "ringtrain/train/config_agreement.hpp"

#include <vector>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/io/results.hpp"

namespace ringtrain::train {
namespace {

// Some rank could not parse its command line: rank 0 prints the lowest such rank's line, as
// it is when every rank has it, else with the ranks that have it.
int refuse_bad_input(const comm::Communicator& comm, const StartRequest& mine) {
  const std::vector<std::string> lines =
      comm.gather_strings_to_root(mine.kind == StartRequest::kBadInput ? mine.text : "");
  if (comm.rank() != 0) return kExitBadInput;
  size_t first = 0;
  while (lines[first].empty()) ++first;
  std::vector<int> alike;
  for (size_t r = 0; r < lines.size(); ++r)
    if (lines[r] == lines[first]) alike.push_back(int(r));
  log::error_for_ranks(alike.size() == lines.size()
                           ? lines[first]
                           : str(lines[first], " (", comm::rank_list(alike), ")"));
  return kExitBadInput;
}

}  // namespace

std::string start_text(const StartRequest& request) {
  std::string text =
      str("ringtrain build = ", io::build_identity(), "\n",
          "--help or --print-deck = ", request.kind == StartRequest::kPrint ? "yes" : "no", "\n");
  return request.kind == StartRequest::kTrain ? text + agreed_config_text(request.config) : text;
}

int agree_on_start(const comm::Communicator& comm, const StartRequest& mine) {
  const bool bad = mine.kind == StartRequest::kBadInput;
  if (!comm.all_ok(!bad)) return refuse_bad_input(comm, mine);
  const std::string disagreement = comm::disagreement_on_keys(comm, start_text(mine));
  if (!disagreement.empty()) {
    if (comm.rank() == 0)
      log::error_for_ranks(disagreement + " (every rank must read the same deck)");
    return kExitBadInput;
  }
  if (mine.kind == StartRequest::kPrint) {
    log::info(mine.text);
    return kExitOk;
  }
  return -1;
}

}  // namespace ringtrain::train
