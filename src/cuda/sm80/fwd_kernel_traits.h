// Compile-time shape of one forward block: tile sizes, warps, shared-memory layouts and copies.
#pragma once
#include <cute/tensor.hpp>

#include "../common/kernel_traits.h"

namespace flashtrain::cuda::sm80 {

template <int kDimQK_, int kDimV_, int kBlockM_, int kBlockN_, int kWarps_, typename Element_>
struct FwdKernelTraits {
  using Element = Element_;
  static constexpr int kDimQK = kDimQK_;
  static constexpr int kDimV = kDimV_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * kWarpSize;

  static_assert(kDimV <= kDimQK, "the output tile reuses the Q tile's shared memory, so Dv <= Dqk");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row MMA slabs");
  static_assert(kBlockN % 16 == 0, "P's columns form whole k16 blocks of the PV GEMM");

  // Warps split the query rows; each warp sees every key column, so the softmax row statistics
  // never cross warps.
  using TiledMma = TiledMmaFor<Element, kWarps>;

  using SmemQ = SmemRowMajor<kBlockM, kDimQK>;
  using SmemK = SmemRowMajor<kBlockN, kDimQK>;
  using SmemV = SmemRowMajor<kBlockN, kDimV>;
  using SmemVt = SmemRowMajorTransposed<kBlockN, kDimV>;
  using SmemO = SmemRowMajor<kBlockM, kDimV>;  // aliases SmemQ once the last QK^T is done

  using CopyQK = GmemCopyFor<Element, kThreads, kDimQK>;
  using CopyV = GmemCopyFor<Element, kThreads, kDimV>;  // also the output store

  static_assert(kBlockN % CopyQK::kRowsPerPass == 0 && kBlockN % CopyV::kRowsPerPass == 0 &&
                    kBlockM % CopyQK::kRowsPerPass == 0 && kBlockM % CopyV::kRowsPerPass == 0,
                "a tile must be whole passes of its global copy");

  static constexpr int kSmemElems = cute::cosize(SmemQ{}) + cute::cosize(SmemK{}) + cute::cosize(SmemV{});
  static constexpr int kSmemBytes = kSmemElems * static_cast<int>(sizeof(Element));
};

}  // namespace flashtrain::cuda::sm80
