// gpu_binding.hpp — which GPU each rank of a node takes: every rank's visible GPUs gathered,
// then the same choice made from the same lists on every rank (backend::select_local_device).
#pragma once

#include <memory>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"

namespace ringtrain::train {

// Collective: what every rank of this rank's node sees (cuda_visible_bus_ids). Never throws
// before the collectives, so no rank is left waiting in them.
backend::NodeGpus gather_node_gpus(const comm::Communicator& comm);

// Collective: this rank's backend as `train` says (backend, precision, GPU sharing). On cuda
// with GPUs present, this rank's GPU of its node, whose index goes to *cuda_device; otherwise
// make_backend (which says why not) and *cuda_device = -1. Training and prediction both use it.
std::unique_ptr<backend::Backend> make_rank_backend(const comm::Communicator& comm,
                                                    const TrainConfig& train, int threads,
                                                    int* cuda_device);

}  // namespace ringtrain::train
