// collective_setup.hpp — creating a communicator from rank 0's unique id so that every rank
// either has one or fails together, with no rank left waiting: the broadcast carries {ok, id}
// (a failure on rank 0 becomes the same error on every rank), each rank's initialisation is
// waited for with a deadline (wait_for_device), and an agreement ends set-up.
//
// Host code: NCCL's calls come in as callables, so the protocol runs under MPI without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringtrain/comm/allreduce/device_wait.hpp"

namespace ringtrain::comm {
class Communicator;
}

namespace ringtrain::comm::allreduce {

struct CollectiveSetupOps {
  // Rank 0 only: the unique id every rank joins with (ncclGetUniqueId). Throws on failure.
  std::function<std::vector<uint8_t>()> make_id;
  // Starts joining with rank 0's id (non-blocking ncclCommInitRankConfig). Throws on failure.
  std::function<void(const std::vector<uint8_t>& id)> start;
  // Polls the initialisation until it has finished; its abort must be safe after a failed
  // start() and do nothing when there is no communicator.
  DeviceWaitOps wait;
};

// Collective over comm. `what` names the communicator ("nccl set-up"). On success every rank
// has joined. Otherwise every rank throws ringtrain::Error, after aborting what it had joined:
//   rank 0's id failed:   "<what>: rank 0 (host H) could not make the unique id: <reason>"
//                         on every rank;
//   a rank's start or wait failed: that rank's own error (wait_for_device's text, with
//                         timeout_s as the deadline), and on the ranks that had joined:
//                         "<what>: another rank failed (its error is reported too);
//                         communicator aborted".
void set_up_collectively(const Communicator& comm, const std::string& what, double timeout_s,
                         const CollectiveSetupOps& ops);

}  // namespace ringtrain::comm::allreduce
