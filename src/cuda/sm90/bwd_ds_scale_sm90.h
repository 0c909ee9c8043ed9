// bf16 inputs: the sm90 backward's dQ = dS K on fp16 operands scaled by exact powers of two.
//
// Rounding dS to bf16 (8 significant bits) before dQ = dS K is what puts the default backward's dQ
// error above the floor on large GQA groups (issue 5: 16:1, dq 4.22e-3 where fp32 dS gives
// 2.70e-3). fp16 keeps 11 bits, but only over [2^-24, 65504]; bf16 dS spans fp32's range. So the
// dQ GEMM reads
//   fp16(dS_ij * s_i)  and  fp16(K_jd * 2^eK)
// and the dQ staging multiplies row i by scale * 2^-eK / s_i, which undoes both exactly:
//   eK  per block, from the tile's max |K|: |K * 2^eK| < 2^kDqOperandLog2Max, so every bf16 K
//       converts exactly (bf16's 8 bits fit fp16's 11) unless it is 2^-28 of the tile's max;
//   s_i per query row, from a bound that holds before dS exists,
//       |dS_ij| = P_ij |dP_ij - D_i| <= |dP_ij| + |D_i| <= Dh max_k |dO_ik| max|V of the tile| + |D_i|,
//       with f_i = 2^-b, max_k |dO_ik| < 2^b, from the preprocess (bwd_plan.h's do_scale):
//       s_i = f_i 2^(kDqOperandLog2Max - c), Dh maxV + |D_i| f_i < 2^c, so |dS_ij s_i| < 2^14.
// The bound is loose (by about the row's key count), but fp16 is finer than bf16 everywhere above
// 2^-16 (subnormal spacing 2^-24 against bf16's relative 2^-9), 2^30 below the bound. A bound
// broken anyway (a caller's lse that makes P > 1) overflows to Inf in dQ, which raises the
// guard's flag and reruns the backward in the safe pass.
// The dK GEMM keeps bf16 dS from registers: dK_j = sum_i dS_ij Q_i cannot undo a per-row scale.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../common/fast_math.h"
#include "bwd_kernel_traits_sm90.h"

namespace flashtrain::cuda::sm90 {

// Scaled |dS| and |K| stay below 2^14: fp16's 65504 with a factor 4 to spare for fp32 rounding.
constexpr int kDqOperandLog2Max = 14;

// s_i of a row from its f_i (the preprocess's dO scale), D and the tile's max |V|.
template <class Traits>
__device__ __forceinline__ float row_scale(float f, float dsum, float v_max) {
  const float bound = fmaf(static_cast<float>(Traits::kHeadDim), v_max, fabsf(dsum) * f);
  const int e = (exponent_above(f) - 1) + kDqOperandLog2Max - exponent_above(bound);  // f = 2^(b - 1)
  return exact_pow2(min(max(e, -126), 126));
}

// 1 / x for x a power of two in [2^-126, 2^126], exactly.
__device__ __forceinline__ float inverse_pow2(float x) { return __int_as_float((254 << 23) - __float_as_int(x)); }

// The dQ factor of each of this thread's accumulator rows (scale_dq_rows' order,
// h + 2 r for row 64 r + 16 warp + lane/4 + 8 h), from a step's slot of SharedStorage::dq_factor.
template <class Traits>
__device__ __forceinline__ cute::array<float, 2 * Traits::kBlockM / 64> dq_row_factors(const float* factor, int tid) {
  cute::array<float, 2 * Traits::kBlockM / 64> f;
  const int row0 = 16 * ((tid % 128) / 32) + (tid % 32) / 4;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < static_cast<int>(f.size()); ++i) f[i] = factor[row0 + 8 * (i % 2) + 64 * (i / 2)];
  return f;
}

// f(i) for this thread's 16-byte vectors i of a K / V tile shared by kThreads threads: unrolled
// whole by the consumers (8 or 4 trips), by 2 in the statistics warps (24 registers).
template <class Traits, int kThreads, class F>
__device__ __forceinline__ void for_each_tile_vector(int thread, F&& f) {
  constexpr int kVecs = Traits::kBlockN * Traits::kHeadDim / 8;
  static_assert(kVecs % kThreads == 0, "whole vectors per thread");
  if constexpr (kThreads == Traits::kNumMmaThreads) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = thread; i < kVecs; i += kThreads) f(i);
  } else {
#pragma unroll 2
    for (int i = thread; i < kVecs; i += kThreads) f(i);
  }
}

// Who makes K's fp16 copy and the tile's maxima: the consumer warpgroups in their prologue, before
// their first step, or (kStatsCopyK) the producer's statistics warps while the consumers run their
// first step, whose dQ GEMM (a step later) is the first reader of the copy. H200, run 20: from the
// statistics warps, the D = 64 default backward ran 2.5-3% faster at S 4k and 6.5-8% at 16k (call
// 4; the consumers' 36 bytes of spills in the loop went away with the prologue's code), while in
// call 3 the deterministic kernels (which read the copy in step 0) ran up to 3% slower and D = 128
// 12-14% slower, for reasons not found (its loop's code barely changed): those keep the prologue.
template <class Traits, bool kDeterministic>
constexpr bool stats_copy_k() {
  return Traits::kScaledDs && Traits::kHeadDim == 64 && !kDeterministic;
}

// bf16 -> fp32 is a 16-bit shift: the low value of a word is bits << 16, the high one its top.
__device__ __forceinline__ float bf16_low(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_high(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// kThreads threads (thread: 0 .. kThreads - 1; the consumers or the statistics warps), once K and
// V have landed: the tile's max |K| and max |V| (rows past the sequence are TMA's zeros), reduced
// through `scratch` (2 floats per warp) and named barrier kBarrier. Returns max |V| and eK, the
// exponent of K's fp16 copy.
template <class Traits, int kThreads, BwdBarrier kBarrier>
__device__ __forceinline__ void tile_abs_maxima(const typename Traits::Element* k, const typename Traits::Element* v,
                                                float* scratch, int thread, float& v_max, int& k_exp) {
  constexpr int kWarps = kThreads / 32;
  const uint4* k4 = reinterpret_cast<const uint4*>(k);
  const uint4* v4 = reinterpret_cast<const uint4*>(v);
  auto abs_max8 = [&](uint4 x, float m) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < 4; ++i) m = fmaxf(m, fmaxf(fabsf(bf16_low(w[i])), fabsf(bf16_high(w[i]))));
    return m;
  };
  float km = 0.0f, vm = 0.0f;
  for_each_tile_vector<Traits, kThreads>(thread, [&](int i) {
    km = abs_max8(k4[i], km);
    vm = abs_max8(v4[i], vm);
  });
  CUTLASS_PRAGMA_UNROLL
  for (int width = 16; width > 0; width /= 2) {
    km = fmaxf(km, __shfl_xor_sync(0xffffffffu, km, width));
    vm = fmaxf(vm, __shfl_xor_sync(0xffffffffu, vm, width));
  }
  if (thread % 32 == 0) {
    scratch[thread / 32] = km;
    scratch[kWarps + thread / 32] = vm;
  }
  cutlass::arch::NamedBarrier::sync(kThreads, static_cast<uint32_t>(kBarrier));
  CUTLASS_PRAGMA_UNROLL
  for (int w = 0; w < kWarps; ++w) {
    km = fmaxf(km, scratch[w]);
    vm = fmaxf(vm, scratch[kWarps + w]);
  }
  v_max = vm;
  k_exp = min(max(kDqOperandLog2Max - exponent_above(km), -100), 100);
}

// kThreads threads: K * 2^eK into the fp16 copy k_dq (same layout as k), made visible to wgmma.
template <class Traits, int kThreads>
__device__ __forceinline__ void convert_k_for_dq(const typename Traits::Element* k, cutlass::half_t* k_dq, int k_exp,
                                                 int thread) {
  const uint4* k4 = reinterpret_cast<const uint4*>(k);
  uint4* kdq4 = reinterpret_cast<uint4*>(k_dq);
  const float g = exact_pow2(k_exp);
  for_each_tile_vector<Traits, kThreads>(thread, [&](int i) {
    const uint4 x = k4[i];
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    uint32_t h[4];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __half2 pair = __floats2half2_rn(bf16_low(w[j]) * g, bf16_high(w[j]) * g);
      h[j] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    kdq4[i] = make_uint4(h[0], h[1], h[2], h[3]);
  });
  cutlass::arch::fence_view_async_shared();  // the copy is read by wgmma (async proxy)
}

}  // namespace flashtrain::cuda::sm90
