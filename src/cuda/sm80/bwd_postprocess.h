// Backward stage 3: round the fp32 accumulators (dQ always; dK / dV when the query-head group was
// split over blocks) to the output dtype, written with the output tensors' strides. The normal
// pass raises the guard's flag when a rounded value is non-finite (so a main kernel that leaves
// dQ to this stage gets dQ checked for free); the safe pass runs only when the flag is set.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/dq_column_order.h"
#include "../common/gated_grid.h"
#include "../common/numerics_flags.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

namespace bwd_postprocess_detail {
constexpr int kThreads = 256;
constexpr int kVec = 4;  // one float4 of the accumulator -> four output elements
}  // namespace bwd_postprocess_detail

// accum is [rows][heads][kDim] over the global row space; `dense_len` is the per-batch sequence
// length of a dense tensor (row r = batch r / len, position r % len) and 0 for varlen (the global
// row is the tensor row, batch stride 0). kStagedOrder: each 32 columns of accum are in the sm90
// D 64 / 128 backward's staged dQ order (common/dq_column_order.h).
template <typename Element, int kDim, BwdPass kPass, bool kStagedOrder>
__global__ void __launch_bounds__(bwd_postprocess_detail::kThreads)
    bwd_convert_kernel(const float* __restrict__ accum, int rows, int heads, int dense_len, Element* out,
                       Strides3 stride, uint32_t* nonfinite) {
  using namespace bwd_postprocess_detail;
  static_assert(kDim % kVec == 0, "head dim must fill whole vectors");
  static_assert(!kStagedOrder || kDim % 32 == 0, "the staged order permutes whole 32-column boxes");
  if (kPass == BwdPass::kSafe && *nonfinite == 0) return;
  constexpr int kVecsPerRow = kDim / kVec;
  const int64_t total = static_cast<int64_t>(rows) * heads * kVecsPerRow;
  bool bad = false;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(x % kVecsPerRow) * kVec;
    const int64_t rh = x / kVecsPerRow;
    const int h = static_cast<int>(rh % heads);
    const int r = static_cast<int>(rh / heads);
    const int b = dense_len > 0 ? r / dense_len : 0;
    const int i = dense_len > 0 ? r - b * dense_len : r;
    const int64_t from = kStagedOrder ? (x & ~int64_t{7}) | staged_dq_chunk(static_cast<int>(x & 7)) : x;
    const float4 a = reinterpret_cast<const float4*>(accum)[from];
    const Element v[kVec] = {static_cast<Element>(a.x), static_cast<Element>(a.y), static_cast<Element>(a.z),
                             static_cast<Element>(a.w)};
    Element* dst = out + static_cast<int64_t>(b) * stride.batch + static_cast<int64_t>(i) * stride.seq +
                   static_cast<int64_t>(h) * stride.head + d;
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(v);
    if constexpr (kPass == BwdPass::kNormal) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) bad |= !isfinite(static_cast<float>(v[e]));
    }
  }
  if constexpr (kPass == BwdPass::kNormal) raise_nonfinite_flag(nonfinite, bad);
}

template <typename Element, int kDim, BwdPass kPass, bool kStagedOrder = false>
void launch_bwd_convert(const float* accum, int rows, int heads, int dense_len, void* out, const Strides3& stride,
                        uint32_t* nonfinite, cudaStream_t stream) {
  using namespace bwd_postprocess_detail;
  // One wave of blocks (a full GPU); the grid-stride loop covers the rest. The safe pass's
  // blocks exit at once unless the guard fired, so one wave is also all it costs (gated_grid.h).
  const int64_t work = static_cast<int64_t>(rows) * heads * (kDim / kVec);
  if (work == 0) return;
  auto kernel = bwd_convert_kernel<Element, kDim, kPass, kStagedOrder>;
  const int64_t tiles = (work + kThreads - 1) / kThreads;
  const unsigned blocks = kPass == BwdPass::kSafe ? safe_pass_blocks(tiles, kernel, kThreads, 0)
                                                  : one_wave_blocks(tiles, kernel, kThreads, 0);
  kernel<<<blocks, kThreads, 0, stream>>>(
      accum, rows, heads, dense_len, static_cast<Element*>(out), stride, nonfinite);
}

// kStagedDq: dq_accum in the staged order (the sm90 D 64 / 128 backward's).
template <typename Element, int kDimQK, int kDimV, BwdPass kPass = BwdPass::kNormal, bool kStagedDq = false>
void launch_bwd_postprocess(const BwdParams& p, cudaStream_t stream) {
  const int dense_q = p.varlen ? 0 : p.max_seqlen_q;
  const int dense_k = p.varlen ? 0 : p.max_seqlen_k;
  uint32_t* const flags = &p.numerics->nonfinite;
  launch_bwd_convert<Element, kDimQK, kPass, kStagedDq>(p.dq_accum, p.total_q, p.heads_q, dense_q, p.dq, p.sdq, flags,
                                                       stream);
  if (p.accumulate_dkv) {
    launch_bwd_convert<Element, kDimQK, kPass>(p.dk_accum, p.total_k, p.heads_k, dense_k, p.dk, p.sdk, flags, stream);
    launch_bwd_convert<Element, kDimV, kPass>(p.dv_accum, p.total_k, p.heads_k, dense_k, p.dv, p.sdv, flags, stream);
  }
}

}  // namespace flashtrain::cuda::sm80
