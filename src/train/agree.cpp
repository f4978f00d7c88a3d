// agree.cpp — failing together: every rank learns whether any rank's phase threw.
#include "ringtrain/train/agree.hpp"

namespace ringtrain::train {

void agree(const comm::Communicator& comm, const std::function<void()>& phase) {
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
  const bool i_failed = failures[0] + failures[1] > 0;
  comm.allreduce_sum(failures, 2);
  if (failures[0] + failures[1] == 0) return;
  const int code = failures[1] > 0 ? kExitFailure : kExitBadInput;
  if (i_failed) throw AgreedError(mine, code);
  throw PeerFailed(code);
}

}  // namespace ringtrain::train
