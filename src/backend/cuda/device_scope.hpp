// device_scope.hpp — makes one device current for a scope and puts the caller's back after:
// for release paths that may run on any thread (a tensor dropped by the comm thread, a
// backend destroyed by a thread bound to another GPU). Never throws.
#pragma once

#include <cuda_runtime_api.h>

namespace ringtrain::backend::cuda {

class DeviceScope {
 public:
  DeviceScope() = default;
  explicit DeviceScope(int device) { enter(device); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() { leave(); }

  // Makes `device` current, remembering the device that was (once per scope).
  void enter(int device) noexcept {
    if (previous_ >= 0) return;
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      current = -1;
    }
    if (current == device) return;
    if (cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    previous_ = current < 0 ? 0 : current;
  }

 private:
  void leave() noexcept {
    if (previous_ < 0) return;
    if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
    previous_ = -1;
  }
  int previous_ = -1;  // the device to restore; -1: nothing changed
};

}  // namespace ringtrain::backend::cuda
