// scratch.hpp — the aligned scratch bytes the point-to-point allreduces grow, never per call.
#pragma once

#include <cstddef>
#include <memory>

namespace ringtrain::comm::allreduce {

struct FreeDeleter {
  void operator()(void* p) const;
};
using ScratchBytes = std::unique_ptr<unsigned char, FreeDeleter>;

// 64-byte aligned, at least 64 bytes, rounded up to a multiple of 64; throws std::bad_alloc.
ScratchBytes allocate_scratch(size_t bytes);

}  // namespace ringtrain::comm::allreduce
