// scratch.cpp — allocate_scratch: 64-byte aligned bytes freed with std::free.
#include "ringtrain/comm/allreduce/scratch.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace ringtrain::comm::allreduce {

void FreeDeleter::operator()(void* p) const {
  std::free(p);
}

ScratchBytes allocate_scratch(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment.
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  return ScratchBytes(static_cast<unsigned char*>(p));
}

}  // namespace ringtrain::comm::allreduce
