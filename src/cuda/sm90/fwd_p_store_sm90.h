// The sm90 forward's P stores (FwdTraits::kPInSmem): this thread's probabilities, rounded to 16 bits
// pair by pair, into the shared P tile that the P V GEMM reads as its A operand.
//
// P is queries x keys, keys contiguous, 128-byte swizzled (FwdTraits::SmemLayoutP: atoms of 8 rows x
// 64 keys, 1 KB, stacked over the rows first). Through CuTe's stmatrix copy the twelve per-atom
// addresses of a thread were computed once and kept across the loop, and at 160 registers a thread
// ptxas spilled them (100 bytes; reloaded every K tile). Here the thread-dependent part of the
// address is one register and each pair's address differs from it by an XOR of the 16-byte chunk
// bits and a constant.
//
// Accumulator order (wgmma C fragment of the S MMA, one m64 atom per warpgroup): value
// i = e + 2 h + 4 c holds row 64 w + 16 warp + lane/4 + 8 h and key 8 c + 2 (lane % 4) + e, so pair
// j = i / 2 is (h, c) = (j % 2, j / 2). Host-callable offsets: tests/cpp/sm90_smem_layout_test.cu
// checks them against CuTe's layout for every thread.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

namespace flashtrain::cuda::sm90 {

// Byte offset from P's base of pair j = (h, c) of consumer thread tid: row 64 w + 16 warp + lane/4
// + 8 h (atom row (row / 8), row lane/4 within it), keys 8 c + 2 (lane % 4) + {0, 1} (atom column
// c / 8, 16-byte chunk (c % 8) ^ (lane / 4)).
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t fwd_p_thread_base(int tid) {
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, r8 = lane / 4;
  return static_cast<uint32_t>((8 * w + 2 * warp) * 1024 + r8 * 128 + r8 * 16 + 4 * (lane % 4));
}
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t fwd_p_pair_offset(uint32_t thread_base, int j) {
  constexpr int kAtomsM = Traits::kBlockM / 8;
  const int h = j % 2, c = j / 2;
  return (thread_base ^ static_cast<uint32_t>((c % 8) * 16)) + static_cast<uint32_t>((h + (c / 8) * kAtomsM) * 1024);
}

#ifdef __CUDACC__
// This thread's fp32 probabilities (S accumulator order) into P, rounded pair by pair (a converted
// copy of the whole tile would sit next to S in registers).
template <class Traits, class Fragment>
__device__ __forceinline__ void store_p(uint32_t p_smem, Fragment const& s, int tid) {
  using Element = typename Traits::Element;
  constexpr int kPairs = decltype(cute::size(s))::value / 2;
  cutlass::NumericArrayConverter<Element, float, 2> convert;
  const uint32_t base = p_smem + fwd_p_thread_base<Traits>(tid);
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kPairs; ++j) {
    cutlass::Array<float, 2> pair;
    pair[0] = s(2 * j);
    pair[1] = s(2 * j + 1);
    const cutlass::Array<Element, 2> rounded = convert(pair);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(fwd_p_pair_offset<Traits>(base, j)),
                 "r"(*reinterpret_cast<const uint32_t*>(&rounded)) : "memory");
  }
}
#endif

}  // namespace flashtrain::cuda::sm90
