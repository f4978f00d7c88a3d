// host_math.hpp — loops on host memory that both CPU backends share: loss, SGD, fill, axpby,
// the ReLU backward of a sum.
#pragma once

#include <cstdint>

#include "ringtrain/backend/backend.hpp"

namespace ringtrain::backend::host {

void check_same_numel(const char* op, const Tensor& a, const Tensor& b);
// dlogits = (softmax - t) / n with t = (1 - smoothing) onehot + smoothing / classes; the loss
// is the mean of -sum t log softmax; sums in double.
LossResult softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t n,
                                 int64_t classes, float* dlogits, float smoothing);
// dlogits = grad_weight * (sigmoid(z) - t) / count; returns the mean BCE (sums in double).
double sigmoid_binary_cross_entropy(const float* logits, const float* targets, int64_t count,
                                    float grad_weight, float* dlogits);
void sgd_update(float* w, const float* g, float* buf, int64_t n, const SgdSpec& spec);
void fill(float* t, int64_t n, float value);
// y = a*x + b*y (x may be null when a == 0).
void axpby(float a, const float* x, float b, float* y, int64_t n);
// dx = a + b where y > 0, else 0 (ReluOp::backward_of_sum), over n values of one layout. The
// sum is multiplied by the mask's 1 or 0, as oneDNN's ReLU backward does: a masked negative
// sum gives -0, the same bits as the add and the ReLU backward run apart.
void relu_backward_of_sum(const float* y, const float* a, const float* b, float* dx, int64_t n);
// The same on bf16 values: the sum in fp32, rounded to nearest even before the mask.
void relu_backward_of_sum(const uint16_t* y, const uint16_t* a, const uint16_t* b, uint16_t* dx,
                          int64_t n);
// True when no value is NaN or infinite.
bool all_finite(const float* t, int64_t n);

}  // namespace ringtrain::backend::host
