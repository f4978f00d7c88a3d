// wiring.hpp — builds the comm pieces on a Communicator, so callers outside comm/ never
// touch an MPI handle.
#pragma once

#include <memory>
#include <string>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/fusion_engine.hpp"
#include "ringtrain/comm/timeline.hpp"

namespace ringtrain::comm {

// Collective: a fusion engine over comm's ranks.
std::unique_ptr<FusionEngine> make_fusion_engine(const Communicator& comm, ReduceFn reduce,
                                                 const FusionOptions& options, Timeline* timeline);

// Collective: every rank's spans into one Chrome-trace file at path, written by rank 0.
void write_timeline(const Communicator& comm, const Timeline& timeline, const std::string& path);

}  // namespace ringtrain::comm
