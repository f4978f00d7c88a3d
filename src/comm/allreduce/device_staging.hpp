// device_staging.hpp — ring, mpi and hierarchical on GPU memory: through pinned host buffers,
// or straight to a CUDA-aware MPI_Allreduce (internal to comm/; CUDA builds only).
#pragma once

#include <memory>

#include "ringtrain/comm/allreduce/allreduce.hpp"

namespace ringtrain::comm::allreduce {

// True when the MPI library says at compile and run time that it takes device pointers.
bool mpi_is_cuda_aware();

// Wraps a host-memory allreducer for the memory of CUDA device `device`: sum() on host memory
// goes straight through; on device memory it copies to a pinned host buffer, sums, and copies
// back, unless inner_takes_device_memory (MPI_Allreduce of a CUDA-aware MPI). Every call first
// binds `device` on the calling thread (the fusion engine's comm thread has no device of its
// own: CUDA would otherwise make a context on device 0 for it).
std::unique_ptr<Allreducer> stage_device_memory(std::unique_ptr<Allreducer> inner, int device,
                                                bool inner_takes_device_memory);

}  // namespace ringtrain::comm::allreduce
