// trainer.hpp — the training run: data, model, fusion engine and optimizer tied together.
#pragma once

#include "ringtrain/backend/devices.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"

namespace ringtrain::train {

// Collective over comm: trains as config says, evaluates, and has rank 0 write the
// results file. A failure in set-up fails every rank together (fail_together.hpp); a failure in
// a step on one rank aborts the job.
void train(const Config& config, comm::Communicator& comm);

// What the deck asks of the CUDA backend of this rank's GPU `device`: train.precision,
// train.deterministic and train.cudnn_workspace_mib.
backend::CudaOptions cuda_options(const TrainConfig& train, int device);

}  // namespace ringtrain::train
