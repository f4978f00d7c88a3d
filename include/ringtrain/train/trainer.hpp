// trainer.hpp — the training run: data, model, fusion engine and optimizer tied together.
#pragma once

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"

namespace ringtrain::train {

// Collective over comm: trains as config says, evaluates, and has rank 0 write the
// results file. A failure in set-up fails every rank together (agree.hpp); a failure in
// a step on one rank aborts the job.
void train(const Config& config, comm::Communicator& comm);

// The whole program behind main(): MPI start-up, the command line, the exit code.
int run_app(int argc, char** argv);

}  // namespace ringtrain::train
