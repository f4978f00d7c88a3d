// kernels.hpp — launchers of our own small CUDA kernels (kernels.cu), all on a given stream.
//
// Plain NCHW fp32 unless said otherwise; every launcher checks its launch. bf16 and fp16
// values travel as their 16-bit patterns (uint16_t) so this header needs no CUDA types
// beyond cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ringtrain/backend/cuda_runtime.hpp"  // divide and the precision conversions

namespace ringtrain::backend::cuda::kernels {

void fill(float* t, int64_t n, float value, cudaStream_t s);
// y = a*x + b*y; x may be null when a == 0.
void axpby(float a, const float* x, float b, float* y, int64_t n, cudaStream_t s);
// Two axpby in one launch, by value (no table to upload): the same bits as two axpby calls.
struct Axpby {
  float a;
  const float* x;
  float b;
  float* y;
  int64_t n;
};
void axpby_pair(const Axpby& first, const Axpby& second, cudaStream_t s);
// w -= lr * (nesterov ? g' + m*buf : buf), buf = m*buf + g', g' = g + wd*w.
void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, cudaStream_t s);
// sgd_update on many tensors in one launch (one row of blocks a tensor, as copy_segments): the
// same arithmetic per value, so the same bits. `tensors` is device memory.
struct SgdSegment {
  float* w;
  const float* g;
  float* buf;
  int64_t count;
  float weight_decay;
};
void sgd_update_segments(const SgdSegment* tensors, int n_tensors, int64_t max_count, float lr,
                         float momentum, bool nesterov, cudaStream_t s);

// One thread per row: with t = (1 - smoothing) onehot + smoothing / classes, dlogits =
// (softmax - t) / rows; row_loss[i] = -sum t log p, row_correct[i] = argmax == label. Labels
// are already checked and on the device.
void softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows,
                           int64_t classes, float smoothing, float* dlogits, double* row_loss,
                           int32_t* row_correct, cudaStream_t s);

// One thread per value: dlogits = grad_weight * (sigmoid(z) - t) / count and the value's BCE
// into value_loss; then one block sums value_loss into *total. Targets are on the device.
void sigmoid_binary_cross_entropy(const float* logits, const float* targets, int64_t count,
                                  float grad_weight, float* dlogits, double* value_loss,
                                  double* total, cudaStream_t s);

// Batch-norm helpers over plain [n, c, hw] (one block per channel, sums in double).
// out[c] = sum (x - center[c])^p with p = 2 when squares, else 1; center may be null.
void channel_sums(const float* x, const float* center, bool squares, int64_t n, int64_t c,
                  int64_t hw, float* out, cudaStream_t s);
// inv_std[c] = 1 / sqrt(var[c] + eps).
void inv_std(const float* var, float eps, int64_t c, float* out, cudaStream_t s);
// dgamma[c] = sum dy * (x - mean) * inv_std, dbeta[c] = sum dy.
void bn_backward_sums(const float* x, const float* dy, const float* mean, const float* inv_std,
                      int64_t n, int64_t c, int64_t hw, float* dgamma, float* dbeta,
                      cudaStream_t s);
// dx = gamma*inv_std * (dy - (sum_dbeta + xhat * sum_dgamma) / count): the sums are
// over every rank's batch (synchronized batch norm).
void bn_backward_dx(const float* x, const float* dy, const float* gamma, const float* mean,
                    const float* inv_std, const float* sum_dgamma, const float* sum_dbeta,
                    float count, int64_t n, int64_t c, int64_t hw, float* dx, cudaStream_t s);

// ---- mixed precision: activations of any element type, plain NCHW or NHWC --------------

// The element type of a typed kernel's memory (16-bit values as their bit patterns).
enum class Elem { kF32, kBF16, kF16 };

// dst = src with both the element type and the order converted; each side is plain
// ([n, c, hw]) or channels-last ([n, hw, c]). 2-D [N, F] tensors are n = N, c = F, hw = 1.
// Rounds to nearest even when narrowing.
void convert(const void* src, Elem src_type, bool src_nhwc, void* dst, Elem dst_type, bool dst_nhwc,
             int64_t n, int64_t c, int64_t hw, cudaStream_t s);
// out = a + b (then max(0, .) when relu); all three of one type, the sum in fp32.
void add_typed(const void* a, const void* b, void* out, Elem type, int64_t n, bool relu,
               cudaStream_t s);
// dx = a + b (the sum in fp32, stored as `type`) where y > 0, else 0; all four of one type and
// one layout.
void relu_backward_of_sum(const void* y, const void* a, const void* b, void* dx, Elem type,
                          int64_t n, cudaStream_t s);
// y[r, c] += bias[c] for a row-major [rows, cols] y of `type` and an fp32 bias.
void add_row_bias_typed(void* y, Elem type, const float* bias, int64_t rows, int64_t cols,
                        cudaStream_t s);
// out[c] = sum over rows of m[r, c], m of `type`, out fp32, in two passes laid out by
// column_sum_plan (column_sum_plan.hpp): fp32 partial sums per chunk of rows into
// `scratch` (plan.scratch_floats of device memory), then double sums of those. The same
// bits for the same shape on every run.
void column_sums_typed(const void* m, Elem type, int64_t rows, int64_t cols, float* out,
                       float* scratch, cudaStream_t s);
// totals[0] = sum of row_loss, totals[1] = sum of row_correct: one block, so the loss of a
// batch reaches the host as two numbers, copied when the trainer asks for them.
void loss_totals(const double* row_loss, const int32_t* row_correct, int64_t rows, double* totals,
                 cudaStream_t s);

// Adds the word terms of x's n fp32 values (core/digest.hpp) to *sum (device, zeroed by the
// caller); the host finishes the digest with finish_digest(*sum, n).
void digest_sum(const float* x, int64_t n, uint64_t* sum, cudaStream_t s);

// Sets *flag (device int, zeroed by the caller) to 1 when any value is inf or NaN.
void flag_nonfinite(const float* x, int64_t n, int32_t* flag, cudaStream_t s);

// Fusion-buffer packing: copies every segment's count floats from src to dst times
// scale, in one launch. The segment table lives in device memory.
struct Segment {
  const float* src;
  float* dst;
  int64_t count;
};
void copy_segments(const Segment* segments, int n_segments, int64_t max_count, float scale,
                   cudaStream_t s);

// ---- LARS, LAMB and AdamW (backend/host_update_rules.cpp is their reference) -------------
// Sums of squares are split where the host splits them (kSumChunk values a partial sum, fp64,
// partials added in order by one block): the same bits in every run.
constexpr int64_t kSumChunk = 1 << 14;
inline int64_t sum_chunks(int64_t n) {
  return (n + kSumChunk - 1) / kSumChunk;
}
// *total = sum of x[i]^2; partials holds sum_chunks(n) doubles of scratch.
void sum_of_squares(const float* x, int64_t n, double* partials, double* total, cudaStream_t s);

enum class Rule { kLars, kLamb, kAdamW };
struct UpdateArgs {
  Rule rule;
  float lr, weight_decay, momentum, beta1, beta2, eps, trust_coef;
  bool layer_adaptation;
  int64_t step;
};
// One update of n values (v null for LARS); scratch holds adaptive_scratch_doubles(n) doubles.
// The trust ratio is computed on the device from the norms: no host wait.
inline int64_t adaptive_scratch_doubles(int64_t n) {
  return sum_chunks(n) + 2;
}
void adaptive_update(float* w, const float* g, float* m, float* v, int64_t n,
                     const UpdateArgs& args, double* scratch, cudaStream_t s);

}  // namespace ringtrain::backend::cuda::kernels
