// fusion_switch.hpp — the environment switches between two ways a backend runs the same
// numbers: those that keep one fused kernel out of a run (RINGTRAIN_CUDA_BN_RELU,
// RINGTRAIN_CUDA_BN_ADD_RELU, RINGTRAIN_CUDA_CONV_RELU, RINGTRAIN_CPU_NORM_POOL,
// RINGTRAIN_CPU_POOL_RELU, RINGTRAIN_CPU_NORM_ADD), RINGTRAIN_CUDA_WORKSPACE,
// RINGTRAIN_CPU_BATCH_NORM, RINGTRAIN_HUGE_PAGES and RINGTRAIN_STREAM_STORES. Internal to
// src/backend.
#pragma once

namespace ringtrain::backend {

// Whether a fused kernel may run: the environment variable `variable` unset or "fused";
// "separate" keeps that fused kernel out (its ops run one after the other), to tell a fault of
// the fused kernel from anything else, or to time the two, with no rebuild. Any other value is
// an InputError.
bool fusion_allowed(const char* variable);

// Whether the environment variable `variable` names `other` rather than `usual` (the default,
// also when unset). Any other value is an InputError naming the variable, the value and both
// settings.
bool env_switch(const char* variable, const char* usual, const char* other);

}  // namespace ringtrain::backend
