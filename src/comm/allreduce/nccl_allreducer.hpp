// nccl_allreducer.hpp — Algorithm::nccl, built only with CUDA (internal to comm/).
#pragma once

#include <memory>

#include "ringtrain/comm/allreduce/allreduce.hpp"

namespace ringtrain::comm::allreduce {

// Collective. Sums device memory (the CUDA backend's tensors) with ncclAllReduce on its own
// communication stream; see allreduce.hpp for the contract.
std::unique_ptr<Allreducer> make_nccl_allreducer(const Communicator& comm,
                                                 const AllreduceOptions& options);

}  // namespace ringtrain::comm::allreduce
