// devices.hpp — GPU discovery, the local-rank -> GPU binding, and the CUDA backend's options.
//
// Present in every build: without CUDA (RINGTRAIN_HAS_CUDA 0) there are no devices, and
// asking for the CUDA backend is an InputError that says how to rebuild.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

// GPUs this process can use: 0 when the build has no CUDA, there is no driver or no
// device. Never throws, never aborts.
int cuda_device_count() noexcept;

// Why cuda_device_count() is what it is, for messages: "built without CUDA",
// "cudaGetDeviceCount: <CUDA's error string>", "cudaGetDeviceCount: 0 devices" or
// "2 devices". Never throws.
std::string cuda_device_status() noexcept;

// The GPU of the rank with this local rank among local_size ranks on a node with
// device_count GPUs: local_rank itself, or local_rank % device_count when ranks may share
// GPUs. More ranks than GPUs without sharing (or no GPU at all) is an InputError.
int select_local_device(int local_rank, int local_size, int device_count, bool allow_sharing);

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
