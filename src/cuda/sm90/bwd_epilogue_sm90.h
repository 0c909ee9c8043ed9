// The sm90 backward's dK / dV epilogue: each consumer warpgroup rounds its 64 key rows of dK and
// dV to 16 bits, stages them in its own rows of V's shared memory and writes them out as whole
// 16-byte row chunks, instead of one 2-byte global store per element (what sm80::store_dkv does,
// and still does here for a partial query-head group's fp32 atomics). The outputs' rows are 16-byte
// aligned: the CUDA backend refuses others (src/cuda/backend.cu, alignment_reason).
//
// The staging uses V's own layout (128-byte swizzled, 8 rows x 64 elements per 1 KB atom, the
// atoms of a 64-column slice stacked over the kBlockN rows): element (64 w + r, 8 c + x) of
// warpgroup w sits at byte (c / 8) kBlockN 128 + (64 w + r) 128 + ((c % 8) ^ (r % 8)) 16 + 2 x.
// So a warpgroup touches only V rows that its own dP GEMMs read, the register pairs' 4-byte
// stores of one instruction (8 rows, one chunk) hit 8 distinct 16-byte bank groups, and a warp's
// 16-byte reads of 8 consecutive chunks of a row do too.
//
// Accumulator order (wgmma C fragment, as in bwd_smem_stores_sm90.h): pair j = (h, c) =
// (j % 2, j / 2) of a 64 x D warpgroup tile holds row 16 warp + lane/4 + 8 h, columns
// 8 c + 2 (lane % 4) + {0, 1}.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../common/fragment.h"
#include "../common/numerics_flags.h"
#include "../sm80/bwd_epilogue.h"
#include "bwd_kernel_traits_sm90.h"

namespace flashtrain::cuda::sm90 {

// Byte offset of (row r, 16-byte chunk c) of warpgroup w's rows in the staging (V's layout).
template <class Traits>
__device__ __forceinline__ uint32_t dkv_stage_offset(int w, int r, int c) {
  return static_cast<uint32_t>((c / 8) * Traits::kBlockN * 128 + (64 * w + r) * 128 + (((c % 8) ^ (r % 8)) * 16));
}

// Warpgroup w's threads all at the same point of its staging (written, or read out).
template <class Traits>
__device__ __forceinline__ void sync_dkv_staging(int w) {
  cutlass::arch::NamedBarrier::sync(Traits::kThreadsPerWarpGroup, static_cast<uint32_t>(BwdBarrier::kEpilogue0) + w);
}

// One 64 x D tile of warpgroup w (this thread's accumulator `acc`, already scaled): rounded into
// the staging at `stage` (V's shared-memory address), then rows [64 w, rows) written to `out`
// (row stride `stride` elements, 16-byte aligned rows). `bad` collects non-finite rounded values.
template <class Traits, class Acc>
__device__ __forceinline__ void store_dkv_rows(const Acc& acc, uint32_t stage, int mma_tid,
                                               typename Traits::Element* out, int64_t stride, int rows, bool& bad) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kThreads = Traits::kThreadsPerWarpGroup;
  const int w = mma_tid / kThreads, t = mma_tid % kThreads;
  const int warp = t / 32, lane = t % 32;
  const auto rounded = convert_fragment<Element>(acc);
  static_assert(decltype(cute::size(rounded))::value == 64 * kHeadDim / kThreads, "a 64 x D tile per warpgroup");
  const uint32_t* pairs = reinterpret_cast<const uint32_t*>(rounded.data());
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < 64 * kHeadDim / kThreads / 2; ++j) {
    const int r = 16 * warp + lane / 4 + 8 * (j % 2), c = j / 2;
    bad |= !isfinite(static_cast<float>(rounded(2 * j))) || !isfinite(static_cast<float>(rounded(2 * j + 1)));
    const uint32_t addr = stage + dkv_stage_offset<Traits>(w, r, c) + 4 * (lane % 4);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pairs[j]));
  }
  sync_dkv_staging<Traits>(w);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < 64 * kChunks / kThreads; ++i) {
    const int k = i * kThreads + t, r = k / kChunks, c = k % kChunks;
    if (64 * w + r < rows) {
      uint4 v;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(stage + dkv_stage_offset<Traits>(w, r, c)));
      *reinterpret_cast<uint4*>(out + (64 * w + r) * stride + 8 * c) = v;
    }
  }
}

// dK (times scale: S was scale * Q K^T) and dV of key tile n0 of head hk, `rows` of them inside
// the sequence. Every wgmma reading V's rows of this warpgroup has retired (the caller makes sure
// of the other warpgroup's reads of V's bytes). A non-finite value raises the guard's flag.
template <class Traits, class ThrMma, class Acc>
__device__ __forceinline__ void store_dkv(const sm80::BwdParams& p, const sm80::SeqGeometry& geo, ThrMma const& thr,
                                          Acc& acc_dk, Acc& acc_dv, int b, int hk, int n0, int rows,
                                          typename Traits::Element* v_smem, int mma_tid) {
  using Element = typename Traits::Element;
  if (p.accumulate_dkv) {
    sm80::store_dkv<Traits>(p, geo, thr, acc_dk, acc_dv, b, hk, n0, rows, 1.0f, &p.numerics->nonfinite);
    return;
  }
  Element* dk = static_cast<Element*>(p.dk) + geo.k_offset(p.sdk, b, n0, hk);
  Element* dv = static_cast<Element*>(p.dv) + geo.k_offset(p.sdv, b, n0, hk);
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc_dk); ++i) acc_dk(i) *= p.scale;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc_dv); ++i) acc_dv(i) *= p.dropout_rescale;
  const uint32_t stage = cute::cast_smem_ptr_to_uint(v_smem);
  bool bad = false;
  store_dkv_rows<Traits>(acc_dv, stage, mma_tid, dv, p.sdv.seq, rows, bad);
  // dK reuses the staging once every thread of the warpgroup has read its dV chunks.
  sync_dkv_staging<Traits>(mma_tid / Traits::kThreadsPerWarpGroup);
  store_dkv_rows<Traits>(acc_dk, stage, mma_tid, dk, p.sdk.seq, rows, bad);
  raise_nonfinite_flag(&p.numerics->nonfinite, bad);
}

}  // namespace flashtrain::cuda::sm90
