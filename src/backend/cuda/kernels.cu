// kernels.cu — our own small CUDA kernels: elementwise ops, SGD, the loss, batch-norm sums,
// precision conversion and fusion-buffer packing. Plain grid-stride loops, nothing clever.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "column_sum_plan.hpp"
#include "kernels.hpp"
#include "ringtrain/core/digest.hpp"

namespace ringtrain::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

int blocks_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// launch(grid, first) for a kernel with a row of blocks per segment (blockIdx.y picks it) and
// enough in a row for `most` values: in slices of at most 65,535 segments, gridDim.y's limit.
template <typename Launch>
void launch_by_segment(int n_segments, int64_t most, Launch launch) {
  for (int first = 0; first < n_segments; first += 65535) {
    const unsigned slice = unsigned(n_segments - first < 65535 ? n_segments - first : 65535);
    launch(dim3(unsigned(blocks_for(most)), slice), first);
    CUDA_CHECK(cudaGetLastError());
  }
}

// i runs over [0, n) across the whole grid.
#define GRID_LOOP(i, n)                                                     \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(blockDim.x) * gridDim.x)

__global__ void fill_kernel(float* t, int64_t n, float value) {
  GRID_LOOP(i, n) t[i] = value;
}

// One value of y = a*x + b*y (x null: y = b*y): both axpby kernels run this, so the same bits.
__device__ __forceinline__ void axpby_value(float a, const float* x, float b, float* y,
                                            int64_t i) {
  y[i] = (x ? a * x[i] : 0.0f) + b * y[i];
}

__global__ void axpby_kernel(float a, const float* x, float b, float* y, int64_t n) {
  GRID_LOOP(i, n) axpby_value(a, x, b, y, i);
}

// blockIdx.y picks the pair's member.
__global__ void axpby_pair_kernel(Axpby first, Axpby second) {
  const Axpby& t = blockIdx.y == 0 ? first : second;
  GRID_LOOP(i, t.n) axpby_value(t.a, t.x, t.b, t.y, i);
}

__global__ void divide_kernel(float* t, int64_t n, float divisor) {
  GRID_LOOP(i, n) t[i] /= divisor;
}

// One value's SGD step: both SGD kernels run this, so one tensor updated alone or among many
// gets the same bits.
__device__ __forceinline__ void sgd_value(float* w, const float* g, float* buf, int64_t i,
                                          float lr, float mu, float wd, bool nesterov) {
  float d = g[i] + wd * w[i];
  float m = mu * buf[i] + d;
  buf[i] = m;
  w[i] -= lr * (nesterov ? d + mu * m : m);
}

__global__ void sgd_kernel(float* w, const float* g, float* buf, int64_t n, float lr, float mu,
                           float wd, bool nesterov) {
  GRID_LOOP(i, n) sgd_value(w, g, buf, i, lr, mu, wd, nesterov);
}

// blockIdx.y picks the tensor; the x dimension strides over its values.
__global__ void sgd_segments_kernel(const SgdSegment* tensors, float lr, float mu, bool nesterov) {
  const SgdSegment t = tensors[blockIdx.y];
  GRID_LOOP(i, t.count) sgd_value(t.w, t.g, t.buf, i, lr, mu, t.weight_decay, nesterov);
}

__global__ void softmax_ce_kernel(const float* logits, const int32_t* labels, int64_t rows,
                                  int64_t classes, float smoothing, float* dlogits,
                                  double* row_loss, int32_t* row_correct) {
  GRID_LOOP(r, rows) {
    const float* z = logits + r * classes;
    float* dz = dlogits + r * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k)
      if (z[k] > z[best]) best = k;
    double total = 0;
    for (int64_t k = 0; k < classes; ++k) total += exp(double(z[k]) - z[best]);
    const double log_total = log(total);
    const int32_t label = labels[r];
    double mean_nll = 0;
    for (int64_t k = 0; k < classes; ++k) mean_nll += log_total - (double(z[k]) - z[best]);
    row_loss[r] = (1.0 - smoothing) * (log_total - (double(z[label]) - z[best])) +
                  double(smoothing) * mean_nll / double(classes);
    row_correct[r] = best == label;
    const double floor = double(smoothing) / double(classes);
    for (int64_t k = 0; k < classes; ++k) {
      double p = exp(double(z[k]) - z[best] - log_total);
      dz[k] = float((p - (floor + (k == label ? 1.0 - smoothing : 0.0))) / double(rows));
    }
  }
}

// One thread per value: the stable BCE of sigmoid(z) against t, and its gradient.
__global__ void sigmoid_bce_kernel(const float* logits, const float* targets, int64_t count,
                                   float grad_weight, float* dlogits, double* value_loss) {
  GRID_LOOP(i, count) {
    const double z = logits[i], t = targets[i];
    value_loss[i] = fmax(z, 0.0) - z * t + log1p(exp(-fabs(z)));
    const double s = 1.0 / (1.0 + exp(-z));
    dlogits[i] = float(double(grad_weight) * (s - t) / double(count));
  }
}

// Sums f(i) over channel blockIdx.x's n*hw elements of plain [n, c, hw] with one block.
template <typename F>
__device__ double channel_reduce(int64_t n, int64_t c, int64_t hw, F f) {
  __shared__ double partial[kThreads];
  const int64_t channel = blockIdx.x, count = n * hw;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
    sum += f(((j / hw) * c + channel) * hw + j % hw);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  double total = partial[0];
  __syncthreads();  // partial is reused by the next reduction in the same kernel
  return total;
}

__global__ void channel_sums_kernel(const float* x, const float* center, bool squares, int64_t n,
                                    int64_t c, int64_t hw, float* out) {
  const float mid = center ? center[blockIdx.x] : 0.0f;
  double sum = channel_reduce(n, c, hw, [&](int64_t i) {
    double d = double(x[i]) - mid;
    return squares ? d * d : d;
  });
  if (threadIdx.x == 0) out[blockIdx.x] = float(sum);
}

__global__ void inv_std_kernel(const float* var, float eps, int64_t c, float* out) {
  GRID_LOOP(i, c) out[i] = float(1.0 / sqrt(double(var[i]) + eps));
}

__global__ void bn_backward_sums_kernel(const float* x, const float* dy, const float* mean,
                                        const float* inv_std, int64_t n, int64_t c, int64_t hw,
                                        float* dgamma, float* dbeta) {
  const float mu = mean[blockIdx.x], k = inv_std[blockIdx.x];
  double sg =
      channel_reduce(n, c, hw, [&](int64_t i) { return double(dy[i]) * (double(x[i]) - mu) * k; });
  double sb = channel_reduce(n, c, hw, [&](int64_t i) { return double(dy[i]); });
  if (threadIdx.x == 0) {
    dgamma[blockIdx.x] = float(sg);
    dbeta[blockIdx.x] = float(sb);
  }
}

__global__ void bn_backward_dx_kernel(const float* x, const float* dy, const float* gamma,
                                      const float* mean, const float* inv_std,
                                      const float* sum_dgamma, const float* sum_dbeta, float count,
                                      int64_t n, int64_t c, int64_t hw, float* dx) {
  GRID_LOOP(i, n * c * hw) {
    const int64_t ch = (i / hw) % c;
    const double k = inv_std[ch], xhat = (double(x[i]) - mean[ch]) * k;
    dx[i] = float(gamma[ch] * k * (dy[i] - (sum_dbeta[ch] + xhat * sum_dgamma[ch]) / count));
  }
}

__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  GRID_LOOP(i, n) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, int64_t n) {
  GRID_LOOP(i, n) out[i] = __bfloat162float(in[i]);
}
__global__ void f32_to_f16_kernel(const float* in, __half* out, int64_t n) {
  GRID_LOOP(i, n) out[i] = __float2half_rn(in[i]);
}
__global__ void f16_to_f32_kernel(const __half* in, float* out, int64_t n) {
  GRID_LOOP(i, n) out[i] = __half2float(in[i]);
}

__device__ float load(const void* p, Elem type, int64_t i) {
  switch (type) {
    case Elem::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case Elem::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ void store(void* p, Elem type, int64_t i, float v) {
  switch (type) {
    case Elem::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case Elem::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// Output index i -> input index: decompose by the output's order, recompose by the input's.
__global__ void convert_kernel(const void* src, Elem src_type, bool src_nhwc, void* dst,
                               Elem dst_type, bool dst_nhwc, int64_t n, int64_t c, int64_t hw) {
  GRID_LOOP(i, n * c * hw) {
    int64_t img, ch, pos;
    if (dst_nhwc) {
      ch = i % c, pos = (i / c) % hw, img = i / (c * hw);
    } else {
      pos = i % hw, ch = (i / hw) % c, img = i / (c * hw);
    }
    const int64_t j = src_nhwc ? (img * hw + pos) * c + ch : (img * c + ch) * hw + pos;
    store(dst, dst_type, i, load(src, src_type, j));
  }
}

__global__ void add_typed_kernel(const void* a, const void* b, void* out, Elem type, int64_t n,
                                 bool relu) {
  GRID_LOOP(i, n) {
    float v = load(a, type, i) + load(b, type, i);
    store(out, type, i, relu && v < 0.0f ? 0.0f : v);
  }
}

__global__ void relu_backward_of_sum_kernel(const void* y, const void* a, const void* b, void* dx,
                                            Elem type, int64_t n) {
  GRID_LOOP(i, n) {
    const float sum = load(a, type, i) + load(b, type, i);
    store(dx, type, i, load(y, type, i) > 0.0f ? sum : 0.0f);
  }
}

__global__ void add_row_bias_typed_kernel(void* y, Elem type, const float* bias, int64_t rows,
                                          int64_t cols) {
  GRID_LOOP(i, rows * cols) store(y, type, i, load(y, type, i) + bias[i % cols]);
}

// Pass 1 of column_sums_typed: block (x, y) sums tile x's columns over chunk y's rows.
__global__ void column_partials_kernel(const void* m, Elem type, int64_t rows, int64_t cols,
                                       int64_t rows_per_chunk, float* partials) {
  constexpr int kCols = ColumnSumPlan::kTileCols, kLanes = ColumnSumPlan::kRowLanes;
  __shared__ float lane_sums[kLanes][kCols];
  const int64_t col = int64_t(blockIdx.x) * kCols + threadIdx.x;
  const int64_t first = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t end = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = first + threadIdx.y; r < end; r += kLanes)
      sum += load(m, type, r * cols + col);
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float total = 0.0f;
  for (int lane = 0; lane < kLanes; ++lane) total += lane_sums[lane][threadIdx.x];
  partials[int64_t(blockIdx.y) * cols + col] = total;
}

// Pass 2: each column's chunk partials, in chunk order.
__global__ void column_totals_kernel(const float* partials, int64_t chunks, int64_t cols,
                                     float* out) {
  GRID_LOOP(c, cols) {
    double sum = 0;
    for (int64_t k = 0; k < chunks; ++k) sum += partials[k * cols + c];
    out[c] = float(sum);
  }
}

// One block: the rows as one channel of [rows, 1, 1].
__global__ void loss_totals_kernel(const double* row_loss, const int32_t* row_correct, int64_t rows,
                                   double* totals) {
  const double loss = channel_reduce(rows, 1, 1, [&](int64_t r) { return row_loss[r]; });
  const double correct =
      channel_reduce(rows, 1, 1, [&](int64_t r) { return double(row_correct[r]); });
  if (threadIdx.x == 0) totals[0] = loss, totals[1] = correct;
}

// One block: the sum of count doubles.
__global__ void sum_kernel(const double* values, int64_t count, double* total) {
  const double sum = channel_reduce(count, 1, 1, [&](int64_t i) { return values[i]; });
  if (threadIdx.x == 0) *total = sum;
}

__global__ void flag_nonfinite_kernel(const float* x, int64_t n, int32_t* flag) {
  GRID_LOOP(i, n)
  if (!isfinite(x[i])) *flag = 1;
}

// Each thread sums the word terms of its words (core/digest.hpp), the block adds its threads'
// sums in shared memory and one atomic add per block folds them into *sum: addition modulo
// 2^64 in any order, so the host loop's bits.
__global__ void digest_sum_kernel(const uint32_t* x, int64_t n, unsigned long long* sum) {
  __shared__ unsigned long long partial[kThreads];
  unsigned long long mine = 0;
  GRID_LOOP(k, (n + 1) / 2) {
    const uint64_t hi = 2 * k + 1 < n ? x[2 * k + 1] : 0u;
    mine += word_term(uint64_t(x[2 * k]) | (hi << 32), uint64_t(k));
  }
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

// blockIdx.y picks the segment; the x dimension strides over its elements.
__global__ void copy_segments_kernel(const Segment* segments, float scale) {
  const Segment seg = segments[blockIdx.y];
  GRID_LOOP(i, seg.count) seg.dst[i] = scale * seg.src[i];
}

// ---- LARS, LAMB and AdamW --------------------------------------------------------------------

// The block's sum of each thread's value, in a fixed tree order.
__device__ double block_sum(double value) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();
  return total;
}

// Block b: partials[b] = sum of x^2 over chunk b (one block a chunk).
__global__ void square_partials_kernel(const float* x, int64_t n, double* partials) {
  const int64_t begin = int64_t(blockIdx.x) * kSumChunk;
  const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double sum = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sum += double(x[i]) * x[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// eta |w| / (|g| + wd |w|) from the two sums of squares; 1 where a norm is 0.
__device__ float lars_trust(const double* w_ss, const double* g_ss, float eta, float wd) {
  const double wn = sqrt(*w_ss), gn = sqrt(*g_ss);
  return wn > 0 && gn > 0 ? float(double(eta) * wn / (gn + double(wd) * wn)) : 1.0f;
}

__global__ void lars_kernel(float* w, const float* g, float* m, int64_t n, float lr, float mu,
                            float wd, float eta, bool adapt, const double* w_ss,
                            const double* g_ss) {
  const float local_lr = lr * (adapt ? lars_trust(w_ss, g_ss, eta, wd) : 1.0f);
  GRID_LOOP(i, n) {
    const float d = g[i] + wd * w[i];
    m[i] = mu * m[i] + local_lr * d;
    w[i] -= m[i];
  }
}

struct Moments {
  float b1, b2, bc1, bc2, eps;
};

__device__ float adam_direction(float g, float& m, float& v, const Moments& a) {
  m = a.b1 * m + (1.0f - a.b1) * g;
  v = a.b2 * v + (1.0f - a.b2) * g * g;
  return (m / a.bc1) / (sqrtf(v / a.bc2) + a.eps);
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, int64_t n, float lr,
                             float wd, Moments a) {
  GRID_LOOP(i, n) w[i] -= lr * (adam_direction(g[i], m[i], v[i], a) + wd * w[i]);
}

// LAMB's first pass, one block a chunk: the moments, and partials[b] = sum of r^2 over it.
__global__ void lamb_moments_kernel(const float* w, const float* g, float* m, float* v, int64_t n,
                                    float wd, Moments a, double* partials) {
  const int64_t begin = int64_t(blockIdx.x) * kSumChunk;
  const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double sum = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float r = adam_direction(g[i], m[i], v[i], a) + wd * w[i];
    sum += double(r) * r;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void lamb_apply_kernel(float* w, const float* m, const float* v, int64_t n, float lr,
                                  float wd, Moments a, bool adapt, const double* w_ss,
                                  const double* r_ss) {
  float trust = 1.0f;
  if (adapt) {
    const double wn = sqrt(*w_ss), rn = sqrt(*r_ss);
    if (wn > 0 && rn > 0) trust = float(wn / rn);
  }
  const float step = lr * trust;
  GRID_LOOP(i, n) w[i] -= step * ((m[i] / a.bc1) / (sqrtf(v[i] / a.bc2) + a.eps) + wd * w[i]);
}

}  // namespace

void sum_of_squares(const float* x, int64_t n, double* partials, double* total, cudaStream_t s) {
  if (n == 0) {
    CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), s));
    return;
  }
  square_partials_kernel<<<unsigned(sum_chunks(n)), kThreads, 0, s>>>(x, n, partials);
  CUDA_CHECK(cudaGetLastError());
  sum_kernel<<<1, kThreads, 0, s>>>(partials, sum_chunks(n), total);
  CUDA_CHECK(cudaGetLastError());
}

void adaptive_update(float* w, const float* g, float* m, float* v, int64_t n,
                     const UpdateArgs& a, double* scratch, cudaStream_t s) {
  if (n == 0) return;
  double* w_ss = scratch;
  double* other_ss = scratch + 1;  // |g|^2 (LARS) or |r|^2 (LAMB)
  double* partials = scratch + 2;
  const double t = double(a.step);
  const Moments moments{a.beta1, a.beta2, float(1.0 - pow(double(a.beta1), t)),
                        float(1.0 - pow(double(a.beta2), t)), a.eps};
  const bool adapt = a.layer_adaptation;
  if (a.rule == Rule::kAdamW) {
    adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, g, m, v, n, a.lr, a.weight_decay, moments);
  } else if (a.rule == Rule::kLars) {
    if (adapt) {
      sum_of_squares(w, n, partials, w_ss, s);
      sum_of_squares(g, n, partials, other_ss, s);
    }
    lars_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, g, m, n, a.lr, a.momentum, a.weight_decay,
                                                   a.trust_coef, adapt, w_ss, other_ss);
  } else {
    if (adapt) sum_of_squares(w, n, partials, w_ss, s);
    lamb_moments_kernel<<<unsigned(sum_chunks(n)), kThreads, 0, s>>>(w, g, m, v, n,
                                                                    a.weight_decay, moments,
                                                                    partials);
    CUDA_CHECK(cudaGetLastError());
    sum_kernel<<<1, kThreads, 0, s>>>(partials, sum_chunks(n), other_ss);
    CUDA_CHECK(cudaGetLastError());
    lamb_apply_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, m, v, n, a.lr, a.weight_decay,
                                                         moments, adapt, w_ss, other_ss);
  }
  CUDA_CHECK(cudaGetLastError());
}

void fill(float* t, int64_t n, float value, cudaStream_t s) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(t, n, value);
  CUDA_CHECK(cudaGetLastError());
}

void axpby_pair(const Axpby& first, const Axpby& second, cudaStream_t s) {
  const int64_t most = first.n > second.n ? first.n : second.n;
  if (most == 0) return;
  axpby_pair_kernel<<<dim3(unsigned(blocks_for(most)), 2), kThreads, 0, s>>>(first, second);
  CUDA_CHECK(cudaGetLastError());
}

void axpby(float a, const float* x, float b, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  axpby_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, x, b, y, n);
  CUDA_CHECK(cudaGetLastError());
}

void divide(float* t, int64_t n, float divisor, cudaStream_t s) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n), kThreads, 0, s>>>(t, n, divisor);
  CUDA_CHECK(cudaGetLastError());
}

void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, g, buf, n, lr, momentum, weight_decay, nesterov);
  CUDA_CHECK(cudaGetLastError());
}

void sgd_update_segments(const SgdSegment* tensors, int n_tensors, int64_t max_count, float lr,
                         float momentum, bool nesterov, cudaStream_t s) {
  if (n_tensors == 0 || max_count == 0) return;
  launch_by_segment(n_tensors, max_count, [&](dim3 grid, int first) {
    sgd_segments_kernel<<<grid, kThreads, 0, s>>>(tensors + first, lr, momentum, nesterov);
  });
}

void softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows,
                           int64_t classes, float smoothing, float* dlogits, double* row_loss,
                           int32_t* row_correct, cudaStream_t s) {
  if (rows == 0) return;
  softmax_ce_kernel<<<blocks_for(rows), kThreads, 0, s>>>(logits, labels, rows, classes, smoothing,
                                                          dlogits, row_loss, row_correct);
  CUDA_CHECK(cudaGetLastError());
}

void sigmoid_binary_cross_entropy(const float* logits, const float* targets, int64_t count,
                                  float grad_weight, float* dlogits, double* value_loss,
                                  double* total, cudaStream_t s) {
  if (count == 0) return;
  sigmoid_bce_kernel<<<blocks_for(count), kThreads, 0, s>>>(logits, targets, count, grad_weight,
                                                            dlogits, value_loss);
  CUDA_CHECK(cudaGetLastError());
  sum_kernel<<<1, kThreads, 0, s>>>(value_loss, count, total);
  CUDA_CHECK(cudaGetLastError());
}

void channel_sums(const float* x, const float* center, bool squares, int64_t n, int64_t c,
                  int64_t hw, float* out, cudaStream_t s) {
  if (c == 0) return;
  channel_sums_kernel<<<unsigned(c), kThreads, 0, s>>>(x, center, squares, n, c, hw, out);
  CUDA_CHECK(cudaGetLastError());
}

void inv_std(const float* var, float eps, int64_t c, float* out, cudaStream_t s) {
  if (c == 0) return;
  inv_std_kernel<<<blocks_for(c), kThreads, 0, s>>>(var, eps, c, out);
  CUDA_CHECK(cudaGetLastError());
}

void bn_backward_sums(const float* x, const float* dy, const float* mean, const float* inv_std,
                      int64_t n, int64_t c, int64_t hw, float* dgamma, float* dbeta,
                      cudaStream_t s) {
  if (c == 0) return;
  bn_backward_sums_kernel<<<unsigned(c), kThreads, 0, s>>>(x, dy, mean, inv_std, n, c, hw, dgamma,
                                                           dbeta);
  CUDA_CHECK(cudaGetLastError());
}

void bn_backward_dx(const float* x, const float* dy, const float* gamma, const float* mean,
                    const float* inv_std, const float* sum_dgamma, const float* sum_dbeta,
                    float count, int64_t n, int64_t c, int64_t hw, float* dx, cudaStream_t s) {
  if (n * c * hw == 0) return;
  bn_backward_dx_kernel<<<blocks_for(n * c * hw), kThreads, 0, s>>>(
      x, dy, gamma, mean, inv_std, sum_dgamma, sum_dbeta, count, n, c, hw, dx);
  CUDA_CHECK(cudaGetLastError());
}

void f32_to_bf16(const float* in, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, reinterpret_cast<__nv_bfloat16*>(out),
                                                        n);
  CUDA_CHECK(cudaGetLastError());
}

void bf16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(reinterpret_cast<const __nv_bfloat16*>(in),
                                                        out, n);
  CUDA_CHECK(cudaGetLastError());
}

void f32_to_f16(const float* in, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  f32_to_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, reinterpret_cast<__half*>(out), n);
  CUDA_CHECK(cudaGetLastError());
}

void f16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  f16_to_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(reinterpret_cast<const __half*>(in), out, n);
  CUDA_CHECK(cudaGetLastError());
}

void convert(const void* src, Elem src_type, bool src_nhwc, void* dst, Elem dst_type, bool dst_nhwc,
             int64_t n, int64_t c, int64_t hw, cudaStream_t s) {
  const int64_t count = n * c * hw;
  if (count == 0) return;
  convert_kernel<<<blocks_for(count), kThreads, 0, s>>>(src, src_type, src_nhwc, dst, dst_type,
                                                        dst_nhwc, n, c, hw);
  CUDA_CHECK(cudaGetLastError());
}

void add_typed(const void* a, const void* b, void* out, Elem type, int64_t n, bool relu,
               cudaStream_t s) {
  if (n == 0) return;
  add_typed_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, b, out, type, n, relu);
  CUDA_CHECK(cudaGetLastError());
}

void relu_backward_of_sum(const void* y, const void* a, const void* b, void* dx, Elem type,
                          int64_t n, cudaStream_t s) {
  if (n == 0) return;
  relu_backward_of_sum_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, a, b, dx, type, n);
  CUDA_CHECK(cudaGetLastError());
}

void add_row_bias_typed(void* y, Elem type, const float* bias, int64_t rows, int64_t cols,
                        cudaStream_t s) {
  if (rows * cols == 0) return;
  add_row_bias_typed_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(y, type, bias, rows, cols);
  CUDA_CHECK(cudaGetLastError());
}

void column_sums_typed(const void* m, Elem type, int64_t rows, int64_t cols, float* out,
                       float* scratch, cudaStream_t s) {
  if (cols == 0) return;
  const ColumnSumPlan plan = column_sum_plan(rows, cols);
  const dim3 grid(unsigned(plan.tiles), unsigned(plan.chunks));
  const dim3 block(ColumnSumPlan::kTileCols, ColumnSumPlan::kRowLanes);
  column_partials_kernel<<<grid, block, 0, s>>>(m, type, rows, cols, plan.rows_per_chunk, scratch);
  CUDA_CHECK(cudaGetLastError());
  column_totals_kernel<<<blocks_for(cols), kThreads, 0, s>>>(scratch, plan.chunks, cols, out);
  CUDA_CHECK(cudaGetLastError());
}

void loss_totals(const double* row_loss, const int32_t* row_correct, int64_t rows, double* totals,
                 cudaStream_t s) {
  loss_totals_kernel<<<1, kThreads, 0, s>>>(row_loss, row_correct, rows, totals);
  CUDA_CHECK(cudaGetLastError());
}

void flag_nonfinite(const float* x, int64_t n, int32_t* flag, cudaStream_t s) {
  if (n == 0) return;
  flag_nonfinite_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, flag);
  CUDA_CHECK(cudaGetLastError());
}

void digest_sum(const float* x, int64_t n, uint64_t* sum, cudaStream_t s) {
  if (n == 0) return;
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "atomicAdd on 64-bit sums");
  digest_sum_kernel<<<blocks_for((n + 1) / 2), kThreads, 0, s>>>(
      reinterpret_cast<const uint32_t*>(x), n, reinterpret_cast<unsigned long long*>(sum));
  CUDA_CHECK(cudaGetLastError());
}

void copy_segments(const Segment* segments, int n_segments, int64_t max_count, float scale,
                   cudaStream_t s) {
  if (n_segments == 0 || max_count == 0) return;
  launch_by_segment(n_segments, max_count, [&](dim3 grid, int first) {
    copy_segments_kernel<<<grid, kThreads, 0, s>>>(segments + first, scale);
  });
}

}  // namespace ringtrain::backend::cuda::kernels
