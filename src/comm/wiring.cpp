// wiring.cpp — the comm pieces built on a Communicator's MPI handle.
#include "ringtrain/comm/wiring.hpp"

namespace ringtrain::comm {

std::unique_ptr<FusionEngine> make_fusion_engine(const Communicator& comm, ReduceFn reduce,
                                                 const FusionOptions& options, Timeline* timeline) {
  return std::make_unique<FusionEngine>(comm.raw(), std::move(reduce), options, timeline);
}

void write_timeline(const Communicator& comm, const Timeline& timeline, const std::string& path) {
  timeline.write_chrome_trace(comm.raw(), path);
}

}  // namespace ringtrain::comm
