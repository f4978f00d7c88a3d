// stream.cpp — the owned CUDA stream of backend/cuda_runtime.hpp.
#include "ringtrain/backend/cuda_runtime.hpp"

namespace ringtrain::backend::cuda {

Stream::Stream() {
  CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}

}  // namespace ringtrain::backend::cuda
