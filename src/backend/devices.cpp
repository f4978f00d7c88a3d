// devices.cpp — GPU discovery, device binding and the CUDA backend's entry point, in every
// build; the CUDA calls themselves live in backend/cuda/ and exist only when it is built.
#include "ringtrain/backend/devices.hpp"

#include "factories.hpp"
#include "ringtrain/build_config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

int cuda_device_count() noexcept {
#if RINGTRAIN_HAS_CUDA
  return cuda::probe_devices().count;
#else
  return 0;
#endif
}

std::string cuda_device_status() noexcept {
#if RINGTRAIN_HAS_CUDA
  return cuda::probe_devices().status;
#else
  return "built without CUDA";
#endif
}

int select_local_device(int local_rank, int local_size, int device_count, bool allow_sharing) {
  RT_CHECK(local_rank >= 0 && local_rank < local_size, "local rank ", local_rank,
           " is outside [0, ", local_size, ")");
  RT_REQUIRE_INPUT(device_count > 0, "train.backend = cuda: no GPU on this node for local rank ",
                   local_rank);
  RT_REQUIRE_INPUT(allow_sharing || local_size <= device_count,
                   "train.backend = cuda: ", local_size, " ranks on this node but only ",
                   device_count, " GPU(s); launch at most ", device_count,
                   " ranks per node or allow ranks to share GPUs in the deck");
  return local_rank % device_count;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
#if RINGTRAIN_HAS_CUDA
  cuda::DeviceProbe probe = cuda::probe_devices();
  RT_REQUIRE_INPUT(probe.count > 0, "train.backend = cuda: no GPU visible (", probe.status, ")");
  RT_REQUIRE_INPUT(options.device >= 0 && options.device < probe.count,
                   "train.backend = cuda: ", "device ", options.device, " does not exist (",
                   probe.status, ")");
  RT_REQUIRE_INPUT(
      options.workspace_limit_mib > 0,
      "train.cudnn_workspace_mib = 0: the cuDNN workspace limit must be at least 1 MiB");
  return cuda::create_backend(options);
#else
  (void)options;
  throw InputError(
      "train.backend = cuda: this ringtrain was built without CUDA (rebuild with make CUDA=1)");
#endif
}

}  // namespace ringtrain::backend
