// host_backend.hpp — what the two host-memory backends (cpu, ref) share: allocation, the
// loss, the optimizers' update rules and elementwise ops on plain fp32 memory, and ready marks
// that need no waiting.
#pragma once

#include <omp.h>

#include "factories.hpp"
#include "host_math.hpp"
#include "host_update_rules.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

// Derived backends add the layer ops and the transfers (upload, download, synchronize).
class HostBackend : public Backend {
 public:
  explicit HostBackend(int threads) : threads_(threads) {
    // OpenMP runs at most OMP_THREAD_LIMIT threads in a region, whatever omp_set_num_threads
    // asked; oneDNN's kernels split the work for the threads they asked for and spin at a
    // barrier for those that never come: a hang, not a slow run.
    const int limit = omp_get_thread_limit();
    RT_REQUIRE_INPUT(threads <= limit, threads, " threads per rank, but OMP_THREAD_LIMIT=", limit,
                     " lets OpenMP start only ", limit, ": set train.threads = ", limit,
                     " or less, or raise or unset OMP_THREAD_LIMIT");
    omp_set_num_threads(threads);
  }

  int threads() const override { return threads_; }
  MemoryUse memory_use() const override { return host_tensor_memory(); }
  void reset_memory_peak() override { reset_host_tensor_peak(); }

  Tensor alloc(const Shape& shape, DType dtype) override {
    RT_CHECK(dtype == DType::kF32, name(), " backend: ", dtype_name(dtype), " not yet supported");
    size_t bytes = size_t(shape_numel(shape)) * sizeof(float);
    return Tensor(shape, dtype, aligned_host_alloc(bytes), bytes);
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& dlogits,
                                   float smoothing) override {
    RT_CHECK(logits.is_plain() && logits.rank() == 2, "loss: logits must be plain [N, classes]");
    if (dlogits.shape() != logits.shape()) dlogits = alloc(logits.shape(), DType::kF32);
    return host::softmax_cross_entropy(logits.f32(), labels, logits.dim(0), logits.dim(1),
                                       dlogits.f32(), smoothing);
  }

  double sigmoid_binary_cross_entropy(const Tensor& logits, const float* targets, float grad_weight,
                                      Tensor& dlogits) override {
    RT_CHECK(logits.is_plain() && logits.rank() == 2, "bce: logits must be plain [N, K]");
    if (dlogits.shape() != logits.shape()) dlogits = alloc(logits.shape(), DType::kF32);
    return host::sigmoid_binary_cross_entropy(logits.f32(), targets, logits.numel(), grad_weight,
                                              dlogits.f32());
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& buf, const SgdSpec& spec) override {
    host::check_same_numel("sgd", w, g);
    host::check_same_numel("sgd", w, buf);
    host::sgd_update(w.f32(), g.f32(), buf.f32(), w.numel(), spec);
  }

  void adaptive_update(Tensor& w, const Tensor& g, Tensor& m, Tensor* v,
                       const AdaptiveSpec& spec) override {
    host::check_same_numel("adaptive update", w, g);
    host::check_same_numel("adaptive update", w, m);
    RT_CHECK((v != nullptr) == (spec.rule != UpdateRule::kLars),
             "adaptive update: a second moment is for LAMB and AdamW only");
    if (v != nullptr) host::check_same_numel("adaptive update", w, *v);
    host::adaptive_update(w.f32(), g.f32(), m.f32(), v ? v->f32() : nullptr, w.numel(), spec);
  }

  double sum_of_squares(const std::vector<const Tensor*>& tensors) override {
    double total = 0;
    for (const Tensor* t : tensors) {
      RT_CHECK(t->is_plain(), "sum_of_squares of a tensor with a backend layout");
      total += host::sum_of_squares(t->f32(), t->numel());
    }
    return total;
  }

  void fill(Tensor& t, float value) override {
    RT_CHECK(t.is_plain(), "fill of a tensor with a backend layout");
    host::fill(t.f32(), t.numel(), value);
  }

  void copy(const Tensor& src, Tensor& dst) override {
    if (dst.shape() != src.shape() || !dst.is_plain()) dst = alloc(src.shape(), DType::kF32);
    download(src, dst.f32());
  }

  void scale(Tensor& t, float factor) override {
    RT_CHECK(t.is_plain(), "scale of a tensor with a backend layout");
    host::axpby(0.0f, nullptr, factor, t.f32(), t.numel());
  }

  bool all_finite(const Tensor& t) override {
    RT_CHECK(t.is_plain(), "all_finite of a tensor with a backend layout");
    return host::all_finite(t.f32(), t.numel());
  }

  std::vector<uint64_t> digests(const std::vector<const Tensor*>& tensors) override {
    std::vector<uint64_t> out;
    for (const Tensor* t : tensors) {
      RT_CHECK(t->is_plain(), "digest of a tensor with a backend layout");
      out.push_back(digest_f32(t->f32(), size_t(t->numel())));
    }
    return out;
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    host::check_same_numel("axpby", x, y);
    RT_CHECK(x.is_plain() && y.is_plain(), "axpby of tensors with a backend layout");
    host::axpby(a, x.f32(), b, y.f32(), y.numel());
  }

  // Host work is done when the call returns.
  void record_ready(size_t) override {}
  void wait_ready(size_t) override {}

 private:
  int threads_;
};

}  // namespace ringtrain::backend
