// fusion_switch.hpp — the environment switches that keep one fused kernel out of a run
// (RINGTRAIN_CUDA_BN_RELU, RINGTRAIN_CUDA_CONV_RELU, RINGTRAIN_CPU_NORM_POOL). Internal to
// src/backend.
#pragma once

namespace ringtrain::backend {

// Whether a fused kernel may run: the environment variable `variable` unset or "fused";
// "separate" keeps that fused kernel out (its ops run one after the other), to tell a fault of
// the fused kernel from anything else, or to time the two, with no rebuild. Any other value is
// an InputError.
bool fusion_allowed(const char* variable);

}  // namespace ringtrain::backend
