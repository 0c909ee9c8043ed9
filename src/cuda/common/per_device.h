// A host-side value computed once per device and call site: occupancy queries and such, which
// cost microseconds a call and do not change while the process runs.
#pragma once
#include <cuda_runtime.h>

#include <atomic>

#include "cuda_check.h"

namespace flashtrain::cuda {

// compute() (a positive int) for the current device, remembered per `Tag` for the first 64 devices;
// later devices compute it on every call.
template <class Tag, class F>
int once_per_device(F&& compute) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  int value = device < kMaxDevices ? cached[device].load(std::memory_order_relaxed) : 0;
  if (value <= 0) {
    value = compute(device);
    if (device < kMaxDevices) cached[device].store(value, std::memory_order_relaxed);
  }
  return value;
}

}  // namespace flashtrain::cuda
