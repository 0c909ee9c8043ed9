// Backward stage 1: D = rowsum(dO * O) in fp32 per (row, query head), lse rewritten in log2 units
// with fully masked rows mapped to +inf, dO's row scale (bwd_plan.h's do_scale: 2^-b with
// max_k |dO_ik| < 2^b), the fp32 accumulators / semaphores and the guard's words zeroed. The safe
// pass (BwdPass::kSafe) runs only when the normal pass raised the guard's flag: it counts the
// rerun, writes the row statistics again (they may live in dq's memory, which the normal pass's
// postprocess overwrote: BwdPlan::stats_in_dq) and zeroes the accumulators again.
// With dropout, out already holds dropout(P) @ V, so rowsum(dO * O) = sum_j P_ij dL/dP_ij stays
// the right correction term for dS.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/fast_math.h"
#include "../common/gated_grid.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

namespace bwd_preprocess_detail {
constexpr int kThreads = 256;
constexpr int kThreadsPerRow = 8;  // one 16-byte vector each; rows of 64..256 take 1..4 passes
constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
constexpr int kVecBytes = 16;
}  // namespace bwd_preprocess_detail

// Rows row_block * kRowsPerBlock ... of query head h in the global row space (bwd_plan.h): D,
// lse * log2e and the zeroed fp32 dQ accumulator.
template <typename Element, int kDimQK, int kDimV>
__device__ __forceinline__ void bwd_preprocess_rows(const BwdParams& p, const int row_block, const int h) {
  using namespace bwd_preprocess_detail;
  constexpr int kVec = kVecBytes / sizeof(Element);
  static_assert(kDimV % kVec == 0 && kDimQK % 4 == 0, "head dims must fill whole vectors");
  const int sub = threadIdx.x % kThreadsPerRow;
  const int r = row_block * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const bool valid = r < p.total_q;
  // Dense tensors index (b, i) with their batch stride; varlen ones have batch stride 0 and
  // their row is the global row itself.
  const int b = (p.varlen || !valid) ? 0 : r / p.max_seqlen_q;
  const int i = p.varlen ? r : r - b * p.max_seqlen_q;

  float sum = 0.0f;
  float do_max = 0.0f;  // max_k |dO_ik|
  if (valid) {
    const Element* o = static_cast<const Element*>(p.out) + static_cast<int64_t>(b) * p.so.batch +
                       static_cast<int64_t>(i) * p.so.seq + static_cast<int64_t>(h) * p.so.head;
    const Element* dout = static_cast<const Element*>(p.dout) + static_cast<int64_t>(b) * p.sdo.batch +
                          static_cast<int64_t>(i) * p.sdo.seq + static_cast<int64_t>(h) * p.sdo.head;
#pragma unroll
    for (int c = sub; c < kDimV / kVec; c += kThreadsPerRow) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c * kVec);
      const uint4 dv = *reinterpret_cast<const uint4*>(dout + c * kVec);
      const Element* oe = reinterpret_cast<const Element*>(&ov);
      const Element* de = reinterpret_cast<const Element*>(&dv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        sum += static_cast<float>(oe[e]) * static_cast<float>(de[e]);
        do_max = fmaxf(do_max, fabsf(static_cast<float>(de[e])));
      }
    }
  }
#pragma unroll
  for (int width = kThreadsPerRow / 2; width > 0; width /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, width);
    do_max = fmaxf(do_max, __shfl_xor_sync(0xffffffffu, do_max, width));
  }

  if (valid) {
    const int64_t stat = static_cast<int64_t>(h) * p.total_q + r;
    if (sub == 0) {
      p.dsum[stat] = sum;
      const float lse = p.lse[static_cast<int64_t>(b) * p.lse_batch_stride +
                              static_cast<int64_t>(h) * p.lse_head_stride +
                              static_cast<int64_t>(i) * p.lse_row_stride];
      p.lse_log2[stat] = lse_to_log2(lse);
      // Clamped so that the sm90 kernel's products of it with a power of two stay normal floats.
      p.do_scale[stat] = exact_pow2(-min(max(exponent_above(do_max), -100), 100));
    }
    float4* dq = reinterpret_cast<float4*>(p.dq_accum + (static_cast<int64_t>(r) * p.heads_q + h) * kDimQK);
#pragma unroll
    for (int c = sub; c < kDimQK / 4; c += kThreadsPerRow) dq[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// Tiles: (ceil(total_q / kRowsPerBlock), Hq), one block per tile in the normal pass; the safe pass
// runs only when the normal pass raised the guard's flag, on one wave of blocks walking every tile
// (gated_grid.h).
template <typename Element, int kDimQK, int kDimV, BwdPass kPass>
__global__ void __launch_bounds__(bwd_preprocess_detail::kThreads)
    bwd_preprocess_kernel(const BwdParams p, const TileGrid tiles) {
  constexpr bool kSafe = kPass == BwdPass::kSafe;
  const bool first_thread = blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0;
  if constexpr (kSafe) {
    if (p.numerics->nonfinite == 0) return;
    if (first_thread) p.numerics->safe_reruns += 1;
    for_each_tile(tiles, [&](int x, int y, int) { bwd_preprocess_rows<Element, kDimQK, kDimV>(p, x, y); });
  } else {
    if (first_thread) *p.numerics = BwdNumericsWords{0u, 0u, 0, 0u};  // 0 is the ordered int of +0.0f
    bwd_preprocess_rows<Element, kDimQK, kDimV>(p, blockIdx.x, blockIdx.y);
  }

  // Accumulators whose rows are not q rows (dK/dV of the KV heads) and the dQ semaphores:
  // a grid-stride sweep shared by every thread of the grid.
  const int64_t thread = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * gridDim.y * blockDim.x;
  if (p.accumulate_dkv) {
    const int64_t dk4 = static_cast<int64_t>(p.total_k) * p.heads_k * kDimQK / 4;
    const int64_t dv4 = static_cast<int64_t>(p.total_k) * p.heads_k * kDimV / 4;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t x = thread; x < dk4; x += threads) reinterpret_cast<float4*>(p.dk_accum)[x] = zero;
    for (int64_t x = thread; x < dv4; x += threads) reinterpret_cast<float4*>(p.dv_accum)[x] = zero;
  }
  if (p.dq_sema != nullptr) {
    const int64_t n = static_cast<int64_t>(p.batch) * p.heads_q * p.m_blocks;
    for (int64_t x = thread; x < n; x += threads) p.dq_sema[x] = 0;
  }
}

template <typename Element, int kDimQK, int kDimV, BwdPass kPass = BwdPass::kNormal>
void launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream) {
  using namespace bwd_preprocess_detail;
  const int row_blocks = p.total_q > 0 ? (p.total_q + kRowsPerBlock - 1) / kRowsPerBlock : 1;
  const TileGrid tiles{row_blocks, p.heads_q > 0 ? p.heads_q : 1, 1};
  auto kernel = bwd_preprocess_kernel<Element, kDimQK, kDimV, kPass>;
  const dim3 grid = kPass == BwdPass::kSafe ? dim3(safe_pass_blocks(tiles.count(), kernel, kThreads, 0)) : tiles.full();
  kernel<<<grid, kThreads, 0, stream>>>(p, tiles);
}

}  // namespace flashtrain::cuda::sm80
