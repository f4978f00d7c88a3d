// gpu_binding.hpp — which GPU each rank of a node takes: every rank's visible GPUs gathered,
// then the same choice made from the same lists on every rank (backend::select_local_device).
#pragma once

#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::train {

// Collective: what every rank of this rank's node sees (cuda_visible_bus_ids). Never throws
// before the collectives, so no rank is left waiting in them.
backend::NodeGpus gather_node_gpus(const comm::Communicator& comm);

}  // namespace ringtrain::train
