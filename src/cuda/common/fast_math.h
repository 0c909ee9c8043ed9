// Device math used on every score: the exp2 of the online softmax, its row statistics (offset,
// rescale factor, lse) and the lse conversion the backward reads; exact powers of two for the
// backward's dS scaling.
#pragma once
#include <cuda_runtime.h>

namespace flashtrain::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)

// 2^x with one MUFU instruction. Inputs are <= 0 in the softmax (scores minus the row max), where
// flushing a subnormal result to zero changes a probability by less than 2^-126: invisible after
// the fp16/bf16 rounding of P. exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The online softmax's row statistics, shared by the sm80 and sm90 forwards, with every rounding
// explicit: the backward recomputes P = exp2(s * scale_log2 - lse_log2) for the P the forward took
// as exp2(s * scale_log2 - offset) / sum, and the two must agree to well under an fp16 ulp of P.
// With logits ~1e3 a row's top probability is ~1, and fp16 rounds it down a step once its
// exponent is 3.5e-4 low; an fp32 rounding at that magnitude is up to 2.4e-4.

// The exp2 offset of a row whose running max is m: m * scale_log2 rounded once (0 while the row
// has seen no visible key, so that its probabilities are exp2(-inf) = 0, not NaN).
__device__ __forceinline__ float softmax_offset(float m, float scale_log2) {
  return m == -INFINITY ? 0.0f : __fmul_rn(m, scale_log2);
}
// The factor that moves sums taken against the offset of running max old_max to `offset`: the old
// offset, rounded as it was, minus the new one, so exactly 1 while the max stays (0 on the zero
// sums of a row that had seen no key). Contracted into one FMA, old_max * scale_log2 - offset was
// the offset's rounding residual, and its factor 1 +- 1.7e-4 compounded over the key tiles into
// lse (not into out, which the same factor scaled): lse off by up to 1.5e-3 over 8 key tiles and
// 2.7e-3 over 16 at logits ~1e3, dV 2x and 3.6x the fp16 floor (H200, issue 5).
__device__ __forceinline__ float softmax_rescale(float old_max, float scale_log2, float offset) {
  return fast_exp2(__fmul_rn(old_max, scale_log2) - offset);
}
// lse = (offset + log2(sum)) * ln 2 from a row's final max and sum, in fp64 so that it is rounded
// once (three fp32 roundings moved the backward's exponent by up to ~4e-4; H200, fp16 logits ~1e3:
// dK error 1.27e-3 -> 8.9e-4).
__device__ __forceinline__ float lse_from_row_stats(float row_max, float scale_log2, float sum) {
  const double offset = softmax_offset(row_max, scale_log2);
  return static_cast<float>((offset + static_cast<double>(log2f(sum))) * 0.6931471805599453);
}
// lse * log2(e), the backward's exponent offset, in fp64 and rounded once (+inf for a row that
// sees no key: P = 0, no NaN).
__device__ __forceinline__ float lse_to_log2(float lse) {
  return lse == -INFINITY ? INFINITY : static_cast<float>(static_cast<double>(lse) * 1.4426950408889634);
}

// 2^e as a float, for e in [-126, 127], built from its exponent bits (exact, no libm call).
__device__ __forceinline__ float exact_pow2(int e) { return __int_as_float((127 + e) << 23); }
// The least b with x < 2^b for a finite x >= 0 that is a normal float (-126 for 0 and subnormals,
// which are all below 2^-126): its unbiased exponent plus one, read from its bits.
__device__ __forceinline__ int exponent_above(float x) { return ((__float_as_int(x) >> 23) & 0xff) - 126; }

}  // namespace flashtrain::cuda
