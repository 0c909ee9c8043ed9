// Device math used on every score: the exp2 of the online softmax and the log of the lse.
#pragma once
#include <cuda_runtime.h>

namespace flashtrain::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;    // ln(2): ln(x) = log2(x) * kLn2

// 2^x with one MUFU instruction. Inputs are <= 0 in the softmax (scores minus the row max), where
// flushing a subnormal result to zero changes a probability by less than 2^-126: invisible after
// the fp16/bf16 rounding of P. exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The lse round trip between the forward and the backward, which must agree to well under an fp16
// ulp of P: the backward recomputes P = exp2(s * scale_log2 - lse_log2) for the P the forward took
// as exp2(s * scale_log2 - offset) / sum, with offset = max * scale_log2 rounded to fp32. With
// logits ~1e3 a row's top probability is ~1, and fp16 rounds it down a step once its exponent is
// 3.5e-4 low. Three fp32 roundings at that magnitude (offset + log2 sum, times ln 2, times log2 e)
// moved it by up to ~4e-4; both conversions now run in fp64, once per row, so each result is
// rounded once (H200, fp16 logits ~1e3: dK error 1.27e-3 -> 8.9e-4). The larger error was the
// forwards' rescaling of the running sum (common/softmax.h, sm90/fwd_softmax_sm90.h).
// lse = (offset + log2(sum)) * ln 2 from the forward's final row statistics.
__device__ __forceinline__ float lse_from_row_stats(float offset, float sum) {
  return static_cast<float>((static_cast<double>(offset) + static_cast<double>(log2f(sum))) * 0.6931471805599453);
}
// lse * log2(e), the backward's exponent offset (+inf for a row that sees no key: P = 0, no NaN).
__device__ __forceinline__ float lse_to_log2(float lse) {
  return lse == -INFINITY ? INFINITY : static_cast<float>(static_cast<double>(lse) * 1.4426950408889634);
}

}  // namespace flashtrain::cuda
