// Device-side numerics flags of the overflow guard (DESIGN.md §3): a kernel raises a bit in a
// device word when an intermediate or a stored gradient turns non-finite. The host never reads
// the word on the normal path: the backward's safe pass (src/cuda/sm80/bwd_plan.h, BwdPass)
// reads it on the device and reruns only when it is set.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>

namespace flashtrain::cuda {

// Bits of the flag word, one per kind of intermediate, so the host can say which one overflowed.
enum NumericsFlag : uint32_t {
  kFlagNonFiniteScores = 1u << 0,  // S = scale * q.k (forward and backward recompute)
  kFlagNonFiniteDP = 1u << 1,      // dP = dO . V^T
  kFlagNonFiniteDS = 1u << 2,      // dS = P * (dP - D)
  kFlagNonFiniteAccum = 1u << 3,   // fp32 accumulators (dQ, dK, dV, O)
  kFlagNonFiniteGrad = 1u << 4,    // dQ, dK or dV rounded to the output dtype
};

__device__ __forceinline__ bool is_finite(float x) { return isfinite(x); }

// True when every element of a register fragment is finite (reads only registers).
template <typename Fragment>
__device__ __forceinline__ bool fragment_is_finite(const Fragment& frag) {
  bool ok = true;
#pragma unroll
  for (int i = 0; i < decltype(cute::size(frag))::value; ++i) ok &= is_finite(static_cast<float>(frag(i)));
  return ok;
}

// Raises `bits` in *flags once per warp (a vote first, so a fully non-finite tile costs one
// atomic, not 32). Lanes may call it divergently: the vote is over the lanes that call. No-op
// when flags is null.
__device__ __forceinline__ void raise_flag_warp(uint32_t* flags, bool raise, uint32_t bits) {
  const unsigned voters = __ballot_sync(__activemask(), raise);
  if (flags != nullptr && voters != 0 && (threadIdx.x % 32) == static_cast<unsigned>(__ffs(voters) - 1))
    atomicOr(flags, bits);
}

// Raises kFlagNonFiniteGrad in *flags when any calling lane saw a non-finite gradient element
// (`any_bad`), one atomic per warp at most. Every backward main kernel's epilogue (sm80 and sm90)
// and the postprocess call it on the values they store: an overflowed dS or accumulator always
// reaches a stored gradient (Inf * x is Inf or NaN), so checking what is stored is enough and
// costs one test per stored element.
// FLASHTRAIN_GUARD=OFF (a build that only measures the guard's cost) compiles the test out.
__device__ __forceinline__ void raise_nonfinite_flag(uint32_t* flags, bool any_bad) {
#ifndef FLASHTRAIN_GUARD_COMPILED_OUT
  raise_flag_warp(flags, any_bad, kFlagNonFiniteGrad);
#endif
}

}  // namespace flashtrain::cuda
