// fail_together.cpp — failing together: every rank learns whether any rank's phase threw, and rank
// 0 prints each distinct message once, naming the ranks that raised it.
#include "ringtrain/train/fail_together.hpp"

#include <map>
#include <vector>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::train {
namespace {

void print_grouped(const std::vector<std::string>& messages, int world) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < int(messages.size()); ++r)
    if (!messages[r].empty()) ranks_of[messages[r]].push_back(r);
  for (const auto& [message, ranks] : ranks_of) {
    if (world == 1)
      log::error_for_ranks(message);
    else
      log::error_for_ranks(str(
          message, " (", int(ranks.size()) == world ? "every rank" : comm::rank_list(ranks), ")"));
  }
}

}  // namespace

void fail_together(const comm::Communicator& comm, const std::function<void()>& phase) {
  std::string mine;
  double failures[2] = {0, 0};  // input errors, other errors
  try {
    phase();
  } catch (const InputError& e) {
    mine = e.what();
    failures[0] = 1;
  } catch (const std::exception& e) {
    mine = e.what();
    failures[1] = 1;
  }
  if (failures[0] + failures[1] > 0 && mine.empty()) mine = "(an error without a message)";
  comm.allreduce_sum(failures, 2);
  if (failures[0] + failures[1] == 0) return;
  std::vector<std::string> messages = comm.gather_strings_to_root(mine);
  if (comm.rank() == 0) print_grouped(messages, comm.size());
  throw PeerFailed(failures[1] > 0 ? kExitFailure : kExitBadInput);
}

int run_to_exit_code(const comm::Communicator& comm, const std::function<void()>& body) {
  try {
    body();
    return kExitOk;
  } catch (const PeerFailed& e) {
    return e.code();
  } catch (const std::exception& e) {
    log::error(e.what());
    const int code = dynamic_cast<const InputError*>(&e) ? kExitBadInput : kExitFailure;
    if (comm.size() > 1) comm.abort(code);
    return code;
  }
}

}  // namespace ringtrain::train
