// devices.cpp — GPU discovery, device binding and the CUDA backend's entry point, in every
// build; the CUDA calls themselves live in backend/cuda/ and exist only when it is built.
#include "ringtrain/backend/devices.hpp"

#include <algorithm>

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

std::vector<std::string> cuda_visible_bus_ids() noexcept {
#if RINGTRAIN_HAS_CUDA
  return cuda::visible_bus_ids();
#else
  return {};
#endif
}

void cuda_profiler_range(bool on) noexcept {
#if RINGTRAIN_HAS_CUDA
  cuda::profiler_range(on);
#else
  (void)on;
#endif
}

namespace {

// Where local rank `l` lands by the same-list rule: its order among the local ranks that
// see exactly its list, and how many they are.
struct Pick {
  int order = 0;
  int group = 0;
};

Pick pick_of(const NodeGpus& node, int l) {
  Pick pick;
  for (int other = 0; other < int(node.visible.size()); ++other) {
    if (node.visible[other] != node.visible[l]) continue;
    pick.group += 1;
    if (other < l) pick.order += 1;
  }
  return pick;
}

int device_of(const NodeGpus& node, int l) {
  return pick_of(node, l).order % int(node.visible[l].size());
}

const char* const kShareHint = "set train.share_gpus = true to let ranks share GPUs";

}  // namespace

int select_local_device(const NodeGpus& node, int local_rank, bool share_gpus) {
  const int local_size = int(node.visible.size());
  RT_CHECK(int(node.ranks.size()) == local_size, "select_local_device: ", node.ranks.size(),
           " ranks but ", local_size, " device lists");
  RT_CHECK(local_rank >= 0 && local_rank < local_size, "local rank ", local_rank,
           " is outside [0, ", local_size, ")");
  const std::vector<std::string>& mine = node.visible[local_rank];
  RT_REQUIRE_INPUT(!mine.empty(), "train.backend = cuda: rank ", node.ranks[local_rank],
                   " on host ", node.host, " sees no GPU");
  const Pick pick = pick_of(node, local_rank);
  const int count = int(mine.size());
  RT_REQUIRE_INPUT(
      share_gpus || pick.group <= count, "train.backend = cuda: ", pick.group, " ranks on host ",
      node.host, " see the same ", count, " GPU(s); launch at most ", count,
      " ranks per node, give each rank its own GPU (srun --gpus-per-task=1), or ", kShareHint);
  const int device = pick.order % count;
  if (share_gpus) return device;
  // Different lists can still name the same GPU (overlapping CUDA_VISIBLE_DEVICES).
  for (int other = 0; other < local_size; ++other) {
    if (other == local_rank || node.visible[other].empty()) continue;
    if (node.visible[other][device_of(node, other)] != mine[device]) continue;
    const int a = std::min(node.ranks[other], node.ranks[local_rank]);
    const int b = std::max(node.ranks[other], node.ranks[local_rank]);
    throw InputError(str("train.backend = cuda: ranks ", a, " and ", b, " on host ", node.host,
                         " would both use GPU ", mine[device],
                         " (their visible devices overlap); give each rank its own GPU or ",
                         kShareHint));
  }
  return device;
}

std::string first_shared_gpu(const std::vector<RankGpu>& gpus) {
  for (size_t b = 1; b < gpus.size(); ++b)
    for (size_t a = 0; a < b; ++a)
      if (gpus[a].host == gpus[b].host && gpus[a].bus_id == gpus[b].bus_id)
        return str("ranks ", a, " and ", b, " both use GPU ", gpus[b].bus_id, " on host ",
                   gpus[b].host);
  return {};
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
