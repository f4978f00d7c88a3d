// collective_setup.cpp — {ok, id} from rank 0, a watched initialisation, and an agreement.
#include "ringtrain/comm/allreduce/collective_setup.hpp"

#include <exception>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {
namespace {

// Rank 0 sends one byte (1: an id follows, 0: the reason it has none follows) and the payload.
std::vector<uint8_t> broadcast_id_or_reason(const Communicator& comm, const std::string& what,
                                            const CollectiveSetupOps& ops) {
  std::vector<uint8_t> message;
  if (comm.rank() == 0) {
    try {
      message = ops.make_id();
      message.insert(message.begin(), 1);
    } catch (const std::exception& e) {
      const std::string reason = str(what, ": rank 0 (host ", comm.hostname(),
                                     ") could not make the unique id: ", e.what());
      message.assign(reason.begin(), reason.end());
      message.insert(message.begin(), 0);
    }
  }
  comm.broadcast(message, 0);
  RT_CHECK(!message.empty(), what, ": empty message from rank 0");
  if (message[0] != 1) throw Error(std::string(message.begin() + 1, message.end()));
  return std::vector<uint8_t>(message.begin() + 1, message.end());
}

}  // namespace

void set_up_collectively(const Communicator& comm, const std::string& what, double timeout_s,
                         const CollectiveSetupOps& ops) {
  const std::vector<uint8_t> id = broadcast_id_or_reason(comm, what, ops);
  std::exception_ptr failure;
  try {
    ops.start(id);
    wait_for_device(str(what, " on rank ", comm.rank(), " (host ", comm.hostname(), ")"), timeout_s,
                    ops.wait);
  } catch (...) {
    failure = std::current_exception();
    ops.wait.abort();  // a start that failed half-way may hold a communicator; once is enough
  }
  // A rank that joined must not keep a communicator whose peers are gone.
  if (comm.all_ok(failure == nullptr)) return;
  if (failure) std::rethrow_exception(failure);
  ops.wait.abort();
  throw Error(str(what, ": another rank failed (its error is reported too); communicator aborted"));
}

}  // namespace ringtrain::comm::allreduce
