// factories.hpp — constructors of the concrete backends, for make_backend (internal).
#pragma once

#include <memory>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend {

std::unique_ptr<Backend> make_cpu_backend(int threads);
std::unique_ptr<Backend> make_ref_backend(int threads);

// Host memory aligned to 64 bytes, at least `bytes` long, freed by the returned owner.
std::shared_ptr<void> aligned_host_alloc(size_t bytes);

}  // namespace ringtrain::backend
