// factory.cpp — make_allreducer: the algorithm a deck names, wrapped for device memory where
// GPUs are visible.
#include "device_staging.hpp"
#include "fp16_predivide.hpp"
#include "nccl_allreducer.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/allreduce/auto_allreduce.hpp"
#include "ringtrain/comm/allreduce/halving_doubling.hpp"
#include "ringtrain/comm/allreduce/hierarchical_allreduce.hpp"
#include "ringtrain/comm/allreduce/mpi_allreduce.hpp"
#include "ringtrain/comm/allreduce/ring_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::allreduce {
namespace {

// The chosen algorithm on the memory it natively reduces (host; device for nccl).
std::unique_ptr<Allreducer> make_selected(const Communicator& comm, Algorithm algorithm,
                                          const AllreduceOptions& options) {
  switch (algorithm) {
    case Algorithm::ring:
      return std::make_unique<RingAllreduce>(comm.raw(), comm.ring_order(), options);
    case Algorithm::rhd:
      return std::make_unique<HalvingDoubling>(comm.raw(), options);
    case Algorithm::automatic:
      return std::make_unique<AutoAllreduce>(comm, options);
    case Algorithm::mpi:
      RT_REQUIRE_INPUT(
          options.wire == Wire::fp32, "allreduce wire format ", to_string(options.wire),
          " needs algorithm ring, rhd, auto or hierarchical (MPI_Allreduce sends fp32)");
      return std::make_unique<MpiAllreduce>(comm, options);
    case Algorithm::hierarchical:
      return std::make_unique<HierarchicalAllreduce>(comm, options);
    case Algorithm::nccl:
#if RINGTRAIN_HAS_CUDA
      return make_nccl_allreducer(comm, options);
#else
      throw InputError(
          "comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make "
          "CUDA=1); use ring, mpi or hierarchical on CPUs");
#endif
  }
  throw Error("unknown allreduce algorithm");
}

}  // namespace

std::unique_ptr<Allreducer> make_allreducer(const Communicator& comm, Algorithm algorithm,
                                            const AllreduceOptions& options) {
  RT_REQUIRE_INPUT(options.ranks_per_node >= 0, "allreduce ranks per node must be >= 0, not ",
                   options.ranks_per_node);
  std::unique_ptr<Allreducer> reducer = make_selected(comm, algorithm, options);
  // fp16 sums overflow at scale where fp32 and bf16 (fp32's exponent range: a pre-divide would
  // only add a rounding) do not; nccl reduces on the device (nccl_allreducer.cpp).
  if (options.wire == Wire::fp16 && algorithm != Algorithm::nccl && comm.size() > 1)
    reducer = predivide_for_fp16_wire(std::move(reducer), comm.size());
#if RINGTRAIN_HAS_CUDA
  // Where GPUs are, data may be device memory (the cuda backend's tensors).
  if (algorithm != Algorithm::nccl && backend::cuda_device_count() > 0)
    reducer =
        stage_device_memory(std::move(reducer), algorithm == Algorithm::mpi && mpi_is_cuda_aware());
#endif
  return reducer;
}

}  // namespace ringtrain::comm::allreduce
