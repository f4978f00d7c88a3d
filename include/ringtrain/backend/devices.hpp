// devices.hpp — GPU discovery, the local-rank -> GPU binding, and the CUDA backend's options.
//
// Present in every build: without CUDA (RINGTRAIN_HAS_CUDA 0) there are no devices, and
// asking for the CUDA backend is an InputError that says how to rebuild.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

// GPUs this process can use: 0 when the build has no CUDA, there is no driver or no
// device. Never throws, never aborts.
int cuda_device_count() noexcept;

// Why cuda_device_count() is what it is, for messages: "built without CUDA",
// "cudaGetDeviceCount: <CUDA's error string>", "cudaGetDeviceCount: 0 devices" or
// "2 devices". Never throws.
std::string cuda_device_status() noexcept;

// PCI bus ids ("0000:3B:00.0") of the GPUs this process sees, in CUDA's order: what
// CUDA_VISIBLE_DEVICES (or a launcher's per-rank binding) left visible. Empty without CUDA
// or a GPU; an id CUDA will not give reads "device <index>". Never throws.
std::vector<std::string> cuda_visible_bus_ids() noexcept;

// Starts (on) or stops (off) the range a CUDA profiler records when it was started with
// profiling off (ncu --profile-from-start off): the kernels of one chosen step, not the
// cuDNN algorithm search before it. Does nothing without CUDA. Never throws.
void cuda_profiler_range(bool on) noexcept;

// What the ranks of one node see, gathered at start-up so each can choose its GPU.
struct NodeGpus {
  std::string host;                               // for messages
  std::vector<int> ranks;                         // the world rank of each local rank
  std::vector<std::vector<std::string>> visible;  // each local rank's cuda_visible_bus_ids()
};

// The device index (into its own visible list) for local rank `local_rank` of `node`.
// Ranks that see the same list of GPUs take them in local-rank order: a rank alone with its
// GPU (srun --gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES) takes device 0; N ranks that
// all see the node's M >= N GPUs take device = local rank. InputError, naming the host and
// the deck key train.share_gpus, when the ranks that see a list outnumber its GPUs, or when
// two ranks would land on the same physical GPU (the same bus id) through different lists,
// unless share_gpus (then ranks wrap round: order % M). A rank that sees no GPU is an
// InputError too.
int select_local_device(const NodeGpus& node, int local_rank, bool share_gpus);

// The physical GPU one rank uses: its host and the GPU's bus id.
struct RankGpu {
  std::string host;
  std::string bus_id;
};

// "" when no two ranks use one physical GPU, else "ranks A and B both use GPU <bus id> on host
// H" for the first such pair (gpus[r] is rank r's). NCCL runs one rank per GPU and refuses a
// second only deep inside its set-up ("Duplicate GPU detected"): this says it first.
std::string first_shared_gpu(const std::vector<RankGpu>& gpus);

// The deck's train.precision, train.deterministic and train.cudnn_workspace_mib land here.
struct CudaOptions {
  int device = 0;                         // CUDA device index (see select_local_device)
  Precision precision = Precision::kF32;  // bf16/fp16: tensor cores, NHWC; tf32: fp32 on them
  bool deterministic = false;             // only convolution algorithms cuDNN calls deterministic
  size_t workspace_limit_mib = 256;       // most cuDNN workspace a convolution algorithm may use
};

// The cuDNN/cuBLAS backend on options.device. InputError when the build has no CUDA or no
// GPU is visible; Error (with CUDA's text) when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);

}  // namespace ringtrain::backend
