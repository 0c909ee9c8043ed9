// Forward numerics telemetry on the GPU (DESIGN.md §3), only when AttentionOptions::report is
// set: the forward kernel folds max |scaled logit| into a device word, a small kernel reduces
// the lse tensor (range over rows that see a key, count of fully masked rows), and the host
// merges the result into the NumericsReport. This path synchronises the stream; the default
// path (report null) pays one never-taken branch per key tile.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>

#include "../../api/problem.h"

namespace flashtrain::cuda::sm80 {

// Device words; floats are stored as order-preserving ints so atomicMin / atomicMax apply.
struct FwdTelemetryWords {
  int max_abs_logit;
  int lse_min;
  int lse_max;
  unsigned long long fully_masked_rows;
};

// Order-preserving float <-> int map (monotone over all non-NaN floats).
__host__ __device__ inline int float_to_ordered(float f) {
#if defined(__CUDA_ARCH__)
  const int i = __float_as_int(f);
#else
  int i;
  static_assert(sizeof(float) == sizeof(int), "32-bit float");
  __builtin_memcpy(&i, &f, sizeof i);
#endif
  return i >= 0 ? i : i ^ 0x7fffffff;
}
__host__ __device__ inline float ordered_to_float(int o) {
  const int i = o >= 0 ? o : o ^ 0x7fffffff;
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
#endif
}

// Warp-wide max of v, then one atomicMax per warp into *word. All lanes must call it.
__device__ __forceinline__ void telemetry_warp_max(int* word, float v) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, width));
  if (threadIdx.x % 32 == 0) atomicMax(word, float_to_ordered(v));
}

// max |s| over the finite entries of a register tile (masked entries are -inf).
template <typename Scores>
__device__ __forceinline__ float finite_abs_max(const Scores& s) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < decltype(cute::size(s))::value; ++i)
    if (isfinite(s(i))) m = fmaxf(m, fabsf(s(i)));
  return m;
}

// Allocates and initialises the words on `stream` (only when p.report is set).
FwdTelemetryWords* begin_fwd_telemetry(cudaStream_t stream);
// After the forward kernel: reduces lse, waits for the stream, merges into *p.report, frees words.
void finish_fwd_telemetry(const Problem& p, FwdTelemetryWords* words, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm80
