// captured_work.cpp — work queued on the compute stream recorded as one CUDA graph
// (stream capture, instantiated once) and queued again by one cudaGraphLaunch: a training
// step's hundreds of launches through cuDNN, cuBLAS and our kernels in one host call.
#include "captured_work.hpp"

#include "device_scope.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend::cuda {
namespace {

class CudaGraphWork : public CapturedWork {
 public:
  CudaGraphWork(Context& ctx, GraphExecOwner exec, size_t operations, std::shared_ptr<void> memory,
                std::vector<std::shared_ptr<void>> kept)
      : ctx_(ctx),
        exec_(std::move(exec)),
        operations_(operations),
        memory_(std::move(memory)),
        kept_(std::move(kept)) {}
  // Waits for launched replays first: the pinned host memory in kept_ is freed at once, and
  // CUDA promises no wait in cudaFreeHost (the pool's blocks would be safe without it: their
  // next users queue on the same stream).
  ~CudaGraphWork() override {
    DeviceScope on(ctx_.device());  // the caller's device back after
    (void)cudaStreamSynchronize(ctx_.stream());
    exec_.reset();
  }

  void replay() override {
    ctx_.activate();
    CUDA_CHECK(cudaGraphLaunch(exec_.get(), ctx_.stream()));
  }
  size_t operations() const override { return operations_; }

 private:
  Context& ctx_;
  GraphExecOwner exec_;
  size_t operations_;
  std::shared_ptr<void> memory_;             // the pool's blocks kept for the replays
  std::vector<std::shared_ptr<void>> kept_;  // what the work reads beyond its tensors
};

// Ends a capture that an op broke off (its own error is the one to report), discarding what
// it recorded and the capture's error state, which is not sticky.
void abandon_capture(cudaStream_t stream) noexcept {
  cudaGraph_t partial = nullptr;
  (void)cudaStreamEndCapture(stream, &partial);
  const GraphOwner discarded(partial);
  (void)cudaGetLastError();
}

}  // namespace

// Relaxed capture mode: the pool may still call cudaMalloc while the step records (a block of
// a size the warm-up steps never asked for); every call that would wait for the stream fails.
std::unique_ptr<CapturedWork> capture_work(Context& ctx, const std::function<void()>& work,
                                           std::vector<std::shared_ptr<void>>& kept) {
  ctx.activate();
  cudaGraph_t recorded = nullptr;
  std::shared_ptr<void> memory = ctx.pool().recording([&] {
    CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed));
    try {
      work();
    } catch (...) {
      abandon_capture(ctx.stream());
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &recorded));
  });
  const GraphOwner graph(recorded);  // the executable form does not need it after
  size_t operations = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &operations));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  return std::make_unique<CudaGraphWork>(ctx, GraphExecOwner(exec), operations, std::move(memory),
                                         std::move(kept));
}

}  // namespace ringtrain::backend::cuda
