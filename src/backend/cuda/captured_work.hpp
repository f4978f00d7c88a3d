// captured_work.hpp — Backend::capture on cuda: the work recorded as one CUDA graph.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "context.hpp"

namespace ringtrain::backend::cuda {

// Records what `work` queues on ctx's stream (nothing runs) as one graph, instantiated once;
// the pool keeps the device memory the recording took and gave back for the replays, and the
// graph keeps `kept` (what the recorded work reads or writes beyond its tensors: staged host
// copies, loss slots, tables; filled while `work` runs). An op that cannot be recorded throws
// its own error (CUDA's capture errors carry a hint); nothing is recorded then.
std::unique_ptr<CapturedWork> capture_work(Context& ctx, const std::function<void()>& work,
                                           std::vector<std::shared_ptr<void>>& kept);

}  // namespace ringtrain::backend::cuda
