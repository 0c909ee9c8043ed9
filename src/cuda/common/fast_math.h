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

}  // namespace flashtrain::cuda
