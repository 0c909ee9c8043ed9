// Forward telemetry: allocation, the lse reduction kernel and the merge into NumericsReport.
#include "fwd_telemetry.h"

#include <algorithm>
#include <cmath>

#include "../common/cuda_check.h"

namespace flashtrain::cuda::sm80 {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // grid-stride: enough blocks to fill the GPU, few atomics

// lse range over rows that see a key, and the count of rows that see none (lse = -inf).
// Rows are (b, h, i) with i < rows_per_batch; varlen passes batch = 1 and total_q rows.
__global__ void __launch_bounds__(kThreads)
    lse_stats_kernel(const float* lse, int64_t batch_stride, int64_t head_stride, int64_t row_stride, int batch,
                     int heads, int64_t rows_per_batch, FwdTelemetryWords* words) {
  const int64_t total = static_cast<int64_t>(batch) * heads * rows_per_batch;
  float lo = INFINITY, hi = -INFINITY;
  unsigned long long masked = 0;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = x % rows_per_batch;
    const int64_t bh = x / rows_per_batch;
    const float v = lse[(bh / heads) * batch_stride + (bh % heads) * head_stride + i * row_stride];
    if (v == -INFINITY) {
      ++masked;
    } else if (!isnan(v)) {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
  }
#pragma unroll
  for (int width = 16; width > 0; width /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, width));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, width));
    masked += __shfl_xor_sync(0xffffffffu, masked, width);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMin(&words->lse_min, float_to_ordered(lo));
    atomicMax(&words->lse_max, float_to_ordered(hi));
    atomicAdd(&words->fully_masked_rows, masked);
  }
}

}  // namespace

FwdTelemetryWords* begin_fwd_telemetry(cudaStream_t stream) {
  FwdTelemetryWords* words = nullptr;
  FT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&words), sizeof(FwdTelemetryWords), stream),
                "cuda forward telemetry: allocating its counters");
  const FwdTelemetryWords init{float_to_ordered(0.0f), float_to_ordered(INFINITY), float_to_ordered(-INFINITY), 0};
  FT_CUDA_CHECK(cudaMemcpyAsync(words, &init, sizeof init, cudaMemcpyHostToDevice, stream),
                "cuda forward telemetry: initialising its counters");
  return words;
}

void finish_fwd_telemetry(const Problem& p, FwdTelemetryWords* words, cudaStream_t stream) {
  const int batch = p.varlen ? 1 : static_cast<int>(p.batch);
  const int64_t rows = p.varlen ? p.total_q : p.max_seqlen_q;
  const int64_t total = batch * p.heads_q * rows;
  if (total > 0) {
    const int blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (total + kThreads - 1) / kThreads));
    lse_stats_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(p.lse.data), p.lse_batch_stride,
                                                      p.lse_head_stride, p.lse_row_stride, batch,
                                                      static_cast<int>(p.heads_q), rows, words);
    check_launch("flashtrain lse_stats_kernel");
  }
  FwdTelemetryWords host{};
  FT_CUDA_CHECK(cudaMemcpyAsync(&host, words, sizeof host, cudaMemcpyDeviceToHost, stream),
                "cuda forward telemetry: reading its counters");
  FT_CUDA_CHECK(cudaFreeAsync(words, stream), "cuda forward telemetry: freeing its counters");
  FT_CUDA_CHECK(cudaStreamSynchronize(stream), "cuda forward telemetry: waiting for the forward");
  NumericsReport& r = *p.report;
  r.max_abs_scaled_logit = std::max(r.max_abs_scaled_logit, static_cast<double>(ordered_to_float(host.max_abs_logit)));
  r.lse_min = std::min(r.lse_min, static_cast<double>(ordered_to_float(host.lse_min)));
  r.lse_max = std::max(r.lse_max, static_cast<double>(ordered_to_float(host.lse_max)));
  r.fully_masked_rows += static_cast<int64_t>(host.fully_masked_rows);
}

}  // namespace flashtrain::cuda::sm80
