// Backward stage 1b for Precision::kHigh: D = sum_j P_ij dL/dP_ij recomputed from q, k, v, dO and
// lse in fp32 (common/exact_dsum.h) over the D = rowsum(dO * O) the preprocess wrote, whose `out`
// is rounded to the input dtype. One warp per (row, query head); lanes split the keys, and their
// partial sums meet in a fixed shuffle tree, so the result is the same bits on every run. It is
// CUDA-core work, O(Sq * Sk * (Dqk + Dv)): the price of precision="high" (bench/RESULTS.md).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../common/cuda_check.h"
#include "../common/exact_dsum.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

namespace bwd_exact_dsum_detail {
constexpr int kWarps = 4;  // rows per block
}

// The batch of global q row r (varlen: the last b with cu_seqlens_q[b] <= r).
__device__ __forceinline__ int batch_of_row(const BwdParams& p, int r) {
  if (!p.varlen) return r / p.max_seqlen_q;
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.cu_seqlens_q[mid] <= r) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Grid: (at most ceil(total_q / kWarps), Hq), striding over the rows. kGated: the guard's safe
// pass, which does nothing unless the normal pass raised the flag (then the grid is small, so the
// common case costs one near-empty launch).
template <typename Element, int kDimQK, int kDimV, bool kGated>
__global__ void __launch_bounds__(bwd_exact_dsum_detail::kWarps * 32) bwd_exact_dsum_kernel(const BwdParams p) {
  if (kGated && p.numerics->nonfinite == 0) return;
  const int lane = threadIdx.x % 32;
  const int h = blockIdx.y;
  for (int r = blockIdx.x * bwd_exact_dsum_detail::kWarps + threadIdx.x / 32; r < p.total_q;
       r += gridDim.x * bwd_exact_dsum_detail::kWarps) {
  const int b = batch_of_row(p, r);
  const SeqGeometry geo(p, b);
  const int i = r - geo.row_q;
  const int hk = h / p.group;
  ExactDsumRow row{};
  row.i = i;
  row.scale = p.scale;
  row.softcap = p.softcap;
  row.alibi_slope = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0f;
  row.lse = p.lse[static_cast<int64_t>(p.varlen ? 0 : b) * p.lse_batch_stride +
                  static_cast<int64_t>(h) * p.lse_head_stride + static_cast<int64_t>(p.varlen ? r : i) * p.lse_row_stride];
  row.dropout = p.dropout;
  row.seed = p.seed;
  row.offset = p.offset;
  row.bh = static_cast<uint32_t>(b * p.heads_q + h);
  row.threshold = p.dropout_threshold;
  row.dropout_rescale = p.dropout_rescale;
  const Element* q = static_cast<const Element*>(p.q) + geo.q_offset(p.sq, b, i, h);
  const Element* dout = static_cast<const Element*>(p.dout) + geo.q_offset(p.sdo, b, i, h);
  const Element* k = static_cast<const Element*>(p.k) + geo.k_offset(p.sk, b, 0, hk);
  const Element* v = static_cast<const Element*>(p.v) + geo.k_offset(p.sv, b, 0, hk);
  float sum = exact_row_dsum(row, geo.mask(p), q, dout, k, p.sk.seq, v, p.sv.seq, kDimQK, kDimV, lane, 32);
#pragma unroll
  for (int width = 16; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
  if (lane == 0) p.dsum[static_cast<int64_t>(h) * p.total_q + r] = sum;
  }
}

// kGated = false: precision="high", every row now. kGated = true: after the safe pass's
// preprocess, overwriting its O-based D only when the guard fired; 4096 blocks at most (16k
// warps, more than an H100/H200 holds at once) keep the launch cheap when it did not.
template <typename Element, int kDimQK, int kDimV, bool kGated>
void launch_bwd_exact_dsum(const BwdParams& p, cudaStream_t stream) {
  using namespace bwd_exact_dsum_detail;
  if (p.total_q == 0 || p.heads_q == 0) return;
  const int row_blocks = (p.total_q + kWarps - 1) / kWarps;
  const int cap = kGated ? std::max(1, 4096 / p.heads_q) : row_blocks;
  const dim3 grid(static_cast<unsigned>(std::min(row_blocks, cap)), static_cast<unsigned>(p.heads_q));
  bwd_exact_dsum_kernel<Element, kDimQK, kDimV, kGated><<<grid, kWarps * 32, 0, stream>>>(p);
  check_launch("bwd_exact_dsum");
}

}  // namespace flashtrain::cuda::sm80
