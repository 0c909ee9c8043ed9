// Compile-time configuration of the sm80 backward main kernel: tile sizes, warp layouts of the
// five GEMMs, shared-memory layouts (swizzled, with transposed views for the GEMMs that read a
// tile along its rows) and the copy atoms that move tiles between memories.
//
// GEMMs of one (KV tile, Q tile) step, in CuTe's C[M,N] = A[M,K] * B[N,K]^T form:
//   S  = Q  K^T    TiledMmaSdP  A = sQ   (M x Dqk)  B = sK   (N x Dqk)
//   dP = dO V^T    TiledMmaSdP  A = sdO  (M x Dv)   B = sV   (N x Dv)
//   dV += P^T dO   TiledMmadKV  A = sPt  (N x M)    B = sdOt (Dv x M)
//   dK += dS^T Q   TiledMmadKV  A = sdSt (N x M)    B = sQt  (Dqk x M)
//   dQ  = dS K     TiledMmadQ   A = sdS  (M x N)    B = sKt  (Dqk x N)
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "../common/kernel_traits.h"
#include "bwd_plan.h"

namespace flashtrain::cuda::sm80 {

// sm80's opt-in shared memory per block (H100/H200 allow 227 KB; the kernel is sized for both).
constexpr int kSmemLimitSm80 = 163 * 1024;

template <int kDimQK_, int kDimV_, typename Element_>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kDimQK = kDimQK_;
  static constexpr int kDimV = kDimV_;
  static constexpr int kBlockM = bwd_tile_shape(kDimQK).block_m;
  static constexpr int kBlockN = bwd_tile_shape(kDimQK).block_n;
  static constexpr int kNWarps = 8;
  static constexpr int kNThreads = kNWarps * 32;

  // Warps along the first (row) mode of each GEMM's output; the rest go along the columns. Each
  // warp-column covers 16 output columns per tile step (two 16x8 MMA atoms), each warp-row 16 rows.
  static constexpr int kWarpsMSdP = 2;                       // S, dP: (M x N)
  static constexpr int kWarpsNdKV = kBlockN >= 128 ? 4 : 2;  // dK, dV: (N x D)
  // dQ = dS K is computed in 64-column chunks from head dim 128 up: a whole fp32 dQ tile next to
  // the dK/dV accumulators does not fit in 255 registers (spills at 128 and 256).
  static constexpr int kDqChunk = (kDimQK >= 128 && kDimQK % 64 == 0) ? 64 : kDimQK;
  static constexpr int kWarpsMdQ = kDqChunk % 64 == 0 ? 2 : 4;  // dQ: (M x kDqChunk)

  static_assert(kDimQK % 32 == 0 && kDimV % 32 == 0, "head dims must be multiples of 32");
  static_assert(kDimV <= kDimQK, "Dv <= Dqk");
  static_assert(kBlockM % (16 * kWarpsMSdP) == 0 && kBlockN % (16 * (kNWarps / kWarpsMSdP)) == 0,
                "S/dP tile must split evenly over the warps");
  static_assert(kBlockN % (16 * kWarpsNdKV) == 0 && kDimV % (16 * (kNWarps / kWarpsNdKV)) == 0 &&
                    kDimQK % (16 * (kNWarps / kWarpsNdKV)) == 0,
                "dK/dV tiles must split evenly over the warps");
  static_assert(kBlockM % (16 * kWarpsMdQ) == 0 && kDqChunk % (16 * (kNWarps / kWarpsMdQ)) == 0,
                "dQ tile must split evenly over the warps");

  template <int kWarpsRow>
  using WarpTiledMma = TiledMmaFor<Element, kWarpsRow, kNWarps / kWarpsRow>;
  using TiledMmaSdP = WarpTiledMma<kWarpsMSdP>;
  using TiledMmadKV = WarpTiledMma<kWarpsNdKV>;
  using TiledMmadQ = WarpTiledMma<kWarpsMdQ>;

  // Shared-memory tiles.
  using SmemLayoutQ = SmemRowMajor<kBlockM, kDimQK>;
  using SmemLayoutQt = SmemRowMajorTransposed<kBlockM, kDimQK>;
  using SmemLayoutdO = SmemRowMajor<kBlockM, kDimV>;
  using SmemLayoutdOt = SmemRowMajorTransposed<kBlockM, kDimV>;
  using SmemLayoutK = SmemRowMajor<kBlockN, kDimQK>;
  using SmemLayoutKt = SmemRowMajorTransposed<kBlockN, kDimQK>;
  using SmemLayoutV = SmemRowMajor<kBlockN, kDimV>;
  using SmemLayoutPdS = SmemRowMajor<kBlockM, kBlockN>;
  using SmemLayoutPdSt = SmemRowMajorTransposed<kBlockM, kBlockN>;

  static constexpr int kSizeQ = kBlockM * kDimQK, kSizedO = kBlockM * kDimV;
  static constexpr int kSizeK = kBlockN * kDimQK, kSizeV = kBlockN * kDimV;
  static constexpr int kSizePdS = kBlockM * kBlockN;
  // Q and dO are double-buffered (the next Q tile streams in during this one's GEMMs) when both
  // buffers fit sm80's shared memory; otherwise (head dim 256) single-buffered. Each stage also
  // holds the tile's row statistics (lse * log2e and D, fp32), so they need no registers during
  // the GEMMs.
  static constexpr int kStatsBytes = 2 * kBlockM * static_cast<int>(sizeof(float));
  static constexpr int smem_bytes(int stages) {
    return (stages * (kSizeQ + kSizedO) + kSizeK + kSizeV + 2 * kSizePdS) * static_cast<int>(sizeof(Element)) +
           stages * kStatsBytes;
  }
  static constexpr int kStagesQdO = smem_bytes(2) <= kSmemLimitSm80 ? 2 : 1;
  static constexpr int kSmemBytes = smem_bytes(kStagesQdO);
  static_assert(kSmemBytes <= kSmemLimitSm80, "backward tiles exceed sm80 shared memory");

  // Global -> shared: 16-byte cp.async; shared -> registers: ldmatrix, transposing for the
  // operands read along their rows; registers -> shared for P and dS: column pairs, 32 bits.
  using GmemCopyQK = typename GmemCopyFor<Element, kNThreads, kDimQK>::Load;
  using GmemCopyV = typename GmemCopyFor<Element, kNThreads, kDimV>::Load;
  using SmemCopyAtom = SmemLoadAtom<Element>;
  using SmemCopyAtomT = SmemLoadTransposedAtom<Element>;
  using SmemStoreAtomPdS = SmemStoreAtom<Element>;
};

}  // namespace flashtrain::cuda::sm80
