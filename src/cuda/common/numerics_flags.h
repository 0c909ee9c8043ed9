// Device-side numerics flags of the overflow guard (DESIGN.md §3): a kernel raises a bit in a
// device word when an intermediate turns non-finite although every input was finite; the host
// reads the word after the kernel and decides whether to rerun in safe mode.
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

// Raises `bits` in *flags once per warp (a warp vote first, so a fully non-finite tile costs one
// atomic, not 32). Every lane of the warp must call it. No-op when flags is null.
__device__ __forceinline__ void raise_flag_warp(uint32_t* flags, bool raise, uint32_t bits) {
  const unsigned voters = __ballot_sync(0xffffffffu, raise);
  if (flags != nullptr && voters != 0 && (threadIdx.x % 32) == static_cast<unsigned>(__ffs(voters) - 1))
    atomicOr(flags, bits);
}

}  // namespace flashtrain::cuda
