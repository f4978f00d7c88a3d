// factory.cpp — make_allreducer: the algorithm a deck names, wrapped for device memory when the
// data lives on a GPU (the cuda backend).
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
      return std::make_unique<HalvingDoubling>(comm.raw(), options, comm.ring_order());
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
      break;  // make_allreducer has said why not
#endif
  }
  throw Error("unknown allreduce algorithm");
}

}  // namespace

DevicePath device_memory_path(Algorithm algorithm, int cuda_device, bool mpi_cuda_aware) {
  RT_REQUIRE_INPUT(algorithm != Algorithm::nccl || cuda_device >= 0,
                   "comm.algorithm = nccl reduces GPU memory, but the gradients of this run are in "
                   "host memory: set train.backend = cuda (or comm.algorithm = ring, rhd, auto, "
                   "mpi or hierarchical for the cpu backend)");
  if (algorithm == Algorithm::nccl) return DevicePath::nccl;
  if (cuda_device < 0) return DevicePath::host;
  return algorithm == Algorithm::mpi && mpi_cuda_aware ? DevicePath::cuda_aware_mpi
                                                       : DevicePath::staged;
}

std::unique_ptr<Allreducer> make_allreducer(const Communicator& comm, Algorithm algorithm,
                                            const AllreduceOptions& options) {
  RT_REQUIRE_INPUT(options.ranks_per_node >= 0, "allreduce ranks per node must be >= 0, not ",
                   options.ranks_per_node);
#if RINGTRAIN_HAS_CUDA
  // No CUDA call at all for host memory: a cpu run makes no CUDA context.
  const bool on_device = options.cuda_device >= 0;
  const bool cuda_aware = on_device && algorithm == Algorithm::mpi && mpi_is_cuda_aware();
  const DevicePath path = device_memory_path(algorithm, options.cuda_device, cuda_aware);
#else
  RT_REQUIRE_INPUT(
      algorithm != Algorithm::nccl,
      "comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make "
      "CUDA=1); use ring, mpi or hierarchical on CPUs");
#endif
  std::unique_ptr<Allreducer> reducer = make_selected(comm, algorithm, options);
  // fp16 sums overflow at scale where fp32 and bf16 (fp32's exponent range: a pre-divide would
  // only add a rounding) do not; nccl reduces on the device (nccl_allreducer.cpp).
  if (options.wire == Wire::fp16 && algorithm != Algorithm::nccl && comm.size() > 1)
    reducer = predivide_for_fp16_wire(std::move(reducer), comm.size());
#if RINGTRAIN_HAS_CUDA
  if (path == DevicePath::staged || path == DevicePath::cuda_aware_mpi)
    reducer = stage_device_memory(std::move(reducer), options.cuda_device,
                                  path == DevicePath::cuda_aware_mpi);
#endif
  return reducer;
}

}  // namespace ringtrain::comm::allreduce
