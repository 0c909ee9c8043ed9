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

// 2^x on the FMA pipe, for the share of a softmax's exponentials that would otherwise queue on the
// MUFU unit (16 results per clock per SM on Hopper, as many as the tensor cores' scores per clock
// at head dim 64). x is rounded to j + f with f in [-1/2, 1/2] by the 1.5 * 2^23 shift, 2^f is a
// degree-4 polynomial (relative error <= 2.9e-6 in fp32 arithmetic, a float64 fit; ex2.approx:
// ~2^-22), and j is added into its exponent bits. x is first clamped to -126, so that the exponent
// stays in range: an input below that, -inf included, gives a value <= 2^-126 instead of 0, which
// no sum that includes its row max's 1 can tell apart (callers must not test a row sum for 0).
__device__ __forceinline__ float poly_exp2(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: x + kShift has round(x) in its low bits
  x = fmaxf(x, -126.0f);
  const float shifted = x + kShift;
  const float f = x - (shifted - kShift);
  float p = fmaf(0.009582852944731712f, f, 0.055906426161527634f);
  p = fmaf(p, f, 0.24024099111557007f);
  p = fmaf(p, f, 0.6931241750717163f);
  p = fmaf(p, f, 1.0f);
  // round(x) << 23 is the shifted value's bits << 23: the shift's own bits all move out.
  return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
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
