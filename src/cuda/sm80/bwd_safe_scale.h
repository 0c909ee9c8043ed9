// The safe pass of the overflow guard (DESIGN.md §3, BwdPass::kSafe in bwd_plan.h).
//
// The main kernel rounds dS = P * (dP - D) to the input dtype for the dK and dQ GEMMs. With a large
// dO, |dS| passes fp16's 65504 although dQ, dK and dV may all fit: the normal pass then stores Inf
// and raises the guard's flag. The safe pass scales each step's dS tile by 2^-e before rounding and
// undoes it in fp32: dQ's contribution is multiplied by 2^e before its atomic add, and the dK
// accumulator is kept in units of 2^-e and multiplied by 2^e when stored. e is one exponent per
// block, non-decreasing over its steps (the accumulator is rescaled exactly when it grows, as the
// online softmax does with its running max), chosen from the tile's max |dS| so the scaled tile
// stays below 2^kSafeDsLog2Max. Powers of two make every rescale exact; the only loss is dS values
// pushed into fp16's subnormals, whose absolute error (2^-25 * 2^e) is about 2^-40 of max |dS|,
// far below the rounding of the largest values.
//
// The safe pass also splits P and dS: the normal pass rounds both to the 16-bit input dtype for the
// dV, dQ and dK GEMMs (relative 2^-11 in fp16, 2^-8 in bf16), the dominant dQ / dK error on hard
// inputs. The safe pass runs each of those GEMMs twice, on hi = round(x) and on lo = round(x - hi),
// into the same fp32 accumulators. x - hi is exact in fp32, so hi + lo holds x to about 2^-22
// (fp16) or 2^-16 (bf16) relative, or to fp16's subnormal spacing 2^-24 absolute for small x.
//
// Precision::kHigh runs the safe pass as the backward's only pass (bwd_launch_template.h), so its
// GEMMs always see the split; the power-of-two dS scaling is exact and changes nothing there.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>

#include "../common/fast_math.h"
#include "../common/fragment.h"
#include "bwd_plan.h"

namespace flashtrain::cuda::sm80 {

// Scaled |dS| stays below 2^15 = 32768, under fp16's 65504 with a factor of 2 to spare.
constexpr int kSafeDsLog2Max = 15;
// The largest exponent the pass uses (2^-kSafeMaxExponent stays a normal fp32 number; |dS| of
// finite fp16/bf16 inputs is far below 2^(kSafeDsLog2Max + kSafeMaxExponent)).
constexpr int kSafeMaxExponent = 120;

// The exponent e >= 0 that brings max |ds| over the whole block below 2^kSafeDsLog2Max. `scratch`
// is kNWarps floats of shared memory that no thread reads between the two barriers. The whole
// block calls it.
template <int kNWarps, class Fragment>
__device__ __forceinline__ int safe_ds_exponent(const Fragment& ds, float* scratch) {
  float m = 0.0f;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(ds); ++i) m = fmaxf(m, fabsf(ds(i)));
#pragma unroll
  for (int width = 16; width > 0; width /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, width));
  __syncthreads();  // the previous user of scratch is done with it
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kNWarps; ++w) m = fmaxf(m, scratch[w]);
  if (!(m < INFINITY)) return kSafeMaxExponent;  // an fp32 overflow: scaling cannot help
  int bits = 0;
  frexpf(m, &bits);  // m < 2^bits
  const int e = bits - kSafeDsLog2Max;
  return e < 0 ? 0 : (e > kSafeMaxExponent ? kSafeMaxExponent : e);
}

// The low half of the split: x - float(hi) rounded to Element, where hi = round(x) is the high half
// the caller already stored. Overwrites x with the fp32 remainder (the caller is done with x). An
// element whose hi is not finite (an fp32 dS overflow, which scaling cannot help) gets lo = 0, so
// it keeps the infinity of the unsplit pass instead of turning into NaN.
template <typename Element, class Fragment, class Hi>
__device__ __forceinline__ auto split_low_half(Fragment& x, const Hi& hi) {
  CUTE_UNROLL
  for (int i = 0; i < cute::size(x); ++i) {
    const float h = static_cast<float>(hi(i));
    x(i) = isfinite(h) ? x(i) - h : 0.0f;
  }
  return convert_fragment<Element>(x);
}

// Precision::kHigh: after the normal pass's preprocess has computed D and lse_log2 and zeroed the
// guard's words, this bit of BwdNumericsWords::nonfinite makes the safe pass's main kernel and
// postprocess run (they run on any non-zero word) without its preprocess, which would count a
// rerun. It is none of the NumericsFlag bits (src/cuda/common/numerics_flags.h): no overflow.
constexpr uint32_t kFlagSplitPassAsMain = 1u << 31;
// Raises kFlagSplitPassAsMain in words->nonfinite, ordered on `stream` (bwd_numerics.cu).
void raise_split_pass_flag(BwdNumericsWords* words, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm80
