// Host-side CUDA error checks: every failing runtime call or launch becomes a flashtrain::Error
// carrying the CUDA error string and what was being attempted.
#pragma once
#include <cuda_runtime.h>

#include "flashtrain/error.h"

// FT_CUDA_CHECK(call, what...): throws flashtrain::Error("<what>: <cuda error>") when call fails.
#define FT_CUDA_CHECK(call, ...)                                                              \
  do {                                                                                        \
    const cudaError_t ft_cuda_err_ = (call);                                                  \
    if (ft_cuda_err_ != cudaSuccess)                                                          \
      throw ::flashtrain::Error(::flashtrain::detail::concat(                                 \
          __VA_ARGS__, ": ", cudaGetErrorName(ft_cuda_err_), " (", cudaGetErrorString(ft_cuda_err_), ")")); \
  } while (0)

namespace flashtrain::cuda {

// Call right after a <<<...>>> launch: reports a bad configuration (too much shared memory,
// grid too large) under the kernel's name instead of failing silently.
inline void check_launch(const char* kernel) {
  FT_CUDA_CHECK(cudaGetLastError(), "cuda: launch of ", kernel, " failed");
}

}  // namespace flashtrain::cuda
