// cuda::first_nonfinite: the GPU side of NonFiniteInputs::kCheck (DESIGN.md §3). One grid-stride
// pass folds the smallest row-major index of a non-finite element into a device word with
// atomicMin; the host reads it (and that element) back. Strided views of up to four dims.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../api/backends.h"
#include "../common/dtype.h"
#include "common/cuda_check.h"

namespace flashtrain::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // grid-stride: enough to fill the GPU, few atomics
constexpr unsigned long long kNone = ~0ull;

struct Shape4 {
  int64_t shape[TensorView::kMaxDims];
  int64_t stride[TensorView::kMaxDims];
  int ndim;
};

__device__ __forceinline__ float load_float(const void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kFloat16: return __half2float(static_cast<const __half*>(data)[offset]);
    case DType::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[offset]);
    default: return static_cast<const float*>(data)[offset];
  }
}

__global__ void __launch_bounds__(kThreads)
    first_nonfinite_kernel(const void* data, DType dtype, Shape4 s, int64_t numel, unsigned long long* first) {
  unsigned long long mine = kNone;
  for (int64_t linear = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; linear < numel;
       linear += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = linear, offset = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      offset += (rem % s.shape[d]) * s.stride[d];
      rem /= s.shape[d];
    }
    if (!isfinite(load_float(data, dtype, offset))) {
      mine = static_cast<unsigned long long>(linear);
      break;  // later indices of this thread are larger
    }
  }
#pragma unroll
  for (int width = 16; width > 0; width /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, mine, width);
    mine = other < mine ? other : mine;
  }
  if (threadIdx.x % 32 == 0 && mine != kNone) atomicMin(first, mine);
}

}  // namespace

int64_t first_nonfinite(const TensorView& t, void* stream_ptr, double* value) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  FT_CHECK(t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16 || t.dtype == DType::kFloat32,
           "cuda: the non-finite input scan reads float16, bfloat16 and float32, got ", dtype_name(t.dtype));
  const int64_t numel = t.numel();
  if (numel == 0) return -1;
  Shape4 s{};
  s.ndim = t.ndim;
  for (int d = 0; d < t.ndim; ++d) {
    s.shape[d] = t.shape[d];
    s.stride[d] = t.stride[d];
  }
  unsigned long long* word = nullptr;
  FT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&word), sizeof *word, stream),
                "cuda: allocating the non-finite input scan's word");
  unsigned long long first = kNone;
  double element = 0.0;
  try {
    FT_CUDA_CHECK(cudaMemsetAsync(word, 0xff, sizeof *word, stream), "cuda: initialising the non-finite scan");
    const int blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (numel + kThreads - 1) / kThreads));
    first_nonfinite_kernel<<<blocks, kThreads, 0, stream>>>(t.data, t.dtype, s, numel, word);
    check_launch("flashtrain first_nonfinite_kernel");
    FT_CUDA_CHECK(cudaMemcpyAsync(&first, word, sizeof first, cudaMemcpyDeviceToHost, stream),
                  "cuda: reading the non-finite scan's result");
    FT_CUDA_CHECK(cudaStreamSynchronize(stream), "cuda: waiting for the non-finite input scan");
    if (first != kNone) {
      int64_t rem = static_cast<int64_t>(first), offset = 0;
      for (int d = t.ndim - 1; d >= 0; --d) {
        offset += (rem % t.shape[d]) * t.stride[d];
        rem /= t.shape[d];
      }
      const std::size_t bytes = dtype_size(t.dtype);
      alignas(8) unsigned char raw[8] = {};
      FT_CUDA_CHECK(cudaMemcpy(raw, static_cast<const char*>(t.data) + offset * static_cast<int64_t>(bytes), bytes,
                               cudaMemcpyDeviceToHost),
                    "cuda: reading the non-finite element");
      element = load_as_double(raw, t.dtype, 0);
    }
  } catch (...) {
    cudaFreeAsync(word, stream);
    throw;
  }
  FT_CUDA_CHECK(cudaFreeAsync(word, stream), "cuda: freeing the non-finite scan's word");
  *value = element;
  return first == kNone ? -1 : static_cast<int64_t>(first);
}

}  // namespace flashtrain::cuda
