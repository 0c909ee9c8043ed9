// Block-level GEMMs on mma.sync: acc += A * B^T over one tile, operands read from shared memory
// with ldmatrix one k16 block ahead of the MMAs so loads and math overlap.
//
// Arguments follow CuTe's partitioning: `r*` are register fragments from
// thr_mma.partition_fragment_A/B, `s*` the shared-memory tiles partitioned by the ldmatrix
// tiled copy (smem_thr_copy.partition_S), `load_*` those tiled copies.
#pragma once
#include <cute/tensor.hpp>

namespace flashtrain::cuda {

// Both operands in shared memory.
template <typename Acc, typename RegA, typename RegB, typename SmemA, typename SmemB, typename TiledMma,
          typename LoadA, typename LoadB>
__device__ __forceinline__ void gemm_ss(Acc& acc, RegA& rA, RegB& rB, const SmemA& sA, const SmemB& sB,
                                        const TiledMma& mma, const LoadA& load_a, const LoadB& load_b) {
  using cute::_;
  auto rA_dst = load_a.get_slice(threadIdx.x).retile_D(rA);
  auto rB_dst = load_b.get_slice(threadIdx.x).retile_D(rB);
  constexpr int kBlocksK = decltype(cute::size<2>(rA))::value;
  static_assert(kBlocksK == decltype(cute::size<2>(rB))::value, "A and B disagree on K");
  cute::copy(load_a, sA(_, _, 0), rA_dst(_, _, 0));
  cute::copy(load_b, sB(_, _, 0), rB_dst(_, _, 0));
#pragma unroll
  for (int k = 0; k < kBlocksK; ++k) {
    if (k + 1 < kBlocksK) {
      cute::copy(load_a, sA(_, _, k + 1), rA_dst(_, _, k + 1));
      cute::copy(load_b, sB(_, _, k + 1), rB_dst(_, _, k + 1));
    }
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// A already in registers (e.g. P converted from the score accumulator), B in shared memory.
template <typename Acc, typename RegA, typename RegB, typename SmemB, typename TiledMma, typename LoadB>
__device__ __forceinline__ void gemm_rs(Acc& acc, const RegA& rA, RegB& rB, const SmemB& sB, const TiledMma& mma,
                                        const LoadB& load_b) {
  using cute::_;
  auto rB_dst = load_b.get_slice(threadIdx.x).retile_D(rB);
  constexpr int kBlocksK = decltype(cute::size<2>(rA))::value;
  static_assert(kBlocksK == decltype(cute::size<2>(rB))::value, "A and B disagree on K");
  cute::copy(load_b, sB(_, _, 0), rB_dst(_, _, 0));
#pragma unroll
  for (int k = 0; k < kBlocksK; ++k) {
    if (k + 1 < kBlocksK) cute::copy(load_b, sB(_, _, k + 1), rB_dst(_, _, k + 1));
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

}  // namespace flashtrain::cuda
