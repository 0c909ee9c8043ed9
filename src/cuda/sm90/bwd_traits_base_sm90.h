// What the traits of both sm90 backward main kernels share (bwd_kernel_traits_sm90.h, whose
// consumer warpgroups split the keys, and bwd_split_traits_sm90.h, whose consumers split D): the
// block's warpgroups and their register budgets, the K / V / Q / dO tiles in shared memory and
// their TMA loads (bwd_producer_sm90.h).
//
// kClusterN_ = 2: the blocks of adjacent key tiles run as a cluster pair that walks the same Q
// tiles; each block loads half of every Q / dO tile and TMA multicasts it into both blocks' shared
// memory, so the L2 serves each tile once per pair (bwd_load_tiles).
#pragma once
#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>

namespace flashtrain::cuda::sm90 {

template <int kHeadDim_, typename Element_, int kBlockM_, int kBlockN_, int kStages_, int kClusterN_ = 1>
struct BwdTraitsBase {
  using Element = Element_;
  using ElementAccum = float;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kDimQK = kHeadDim;  // the names sm80::store_dkv / accumulate_dq read
  static constexpr int kDimV = kHeadDim;
  static_assert(cute::is_same_v<Element, cutlass::half_t> || cute::is_same_v<Element, cutlass::bfloat16_t>,
                "sm90 backward: element type must be fp16 or bf16");

  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kBlockN = kBlockN_;  // key rows per block
  static constexpr int kStages = kStages_;  // Q / dO / row-statistics buffers
  static constexpr int kClusterN = kClusterN_;  // blocks (adjacent key tiles) sharing each Q / dO load
  static_assert(kClusterN == 1 || kClusterN == 2, "a block alone or a cluster pair");
  // The fewest units (heads) a band of the causal launch order holds (bwd_band_units); the L2
  // rule alone decides here.
  static constexpr int kMinBandUnits = 1;

  static constexpr int kNumMmaWarpGroups = 2;
  static constexpr int kThreadsPerWarpGroup = cutlass::NumThreadsPerWarpGroup;
  static constexpr int kNumMmaThreads = kNumMmaWarpGroups * kThreadsPerWarpGroup;
  static constexpr int kNumThreads = kNumMmaThreads + kThreadsPerWarpGroup;  // + the producer warpgroup
  // Producer warpgroup (warpgroup 0): warp 0 issues the TMA loads, warps 2 and 3 fetch the row
  // statistics (warp 1 adds the staged dQ where the kernel stages it; in the split-D kernel it passes
  // the deterministic dQ turns on).
  static constexpr int kStatsWarp = 2;
  static constexpr int kStatsThreads = 64;
  // setmaxnreg budgets: 384 threads launch with 168 registers; the producer's 144 freed per thread
  // are the consumers' 72 more (24 * 128 + 240 * 256 = 168 * 384).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs * kThreadsPerWarpGroup + kConsumerRegs * kNumMmaThreads <= 65536,
                "register budgets exceed the register file");

  using Int_M = cute::Int<kBlockM>;
  using Int_N = cute::Int<kBlockN>;
  using Int_D = cute::Int<kHeadDim>;

  using SmemAtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;  // 8 x 64 elements, the inner dim contiguous
  static_assert(kHeadDim % cute::size<1>(SmemAtomK{}) == 0, "head dim must be a multiple of the swizzle row");
  using SmemLayoutKV = decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<Int_N, Int_D>{}));
  // K^T (D x keys) over K's bytes: the B operand of dQ = dS K.
  using SmemLayoutKt = decltype(cute::composition(
      SmemLayoutKV{}, cute::make_ordered_layout(cute::Shape<Int_D, Int_N>{}, cute::Step<cute::_2, cute::_1>{})));
  using SmemLayoutQdO = decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<Int_M, Int_D, cute::Int<kStages>>{}));
  // Q^T / dO^T (D x queries x stages): the B operands of dK += dS^T Q and dV += P^T dO.
  using SmemLayoutQdOt = decltype(cute::composition(
      SmemLayoutQdO{}, cute::make_ordered_layout(cute::Shape<Int_D, Int_M, cute::Int<kStages>>{},
                                                 cute::Step<cute::_2, cute::_1, cute::_3>{})));

  // Global tensors as (seq, dim, head, batch); dim is the contiguous one.
  using ShapeQKV = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using StrideQKV = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GmemLayoutQKV = cute::Layout<ShapeQKV, StrideQKV>;
  using GmemTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)),
                                                GmemLayoutQKV{}));
  // Q and dO: each block of a cluster pair loads half of the tile into both blocks.
  using TmaOpQdO = std::conditional_t<(kClusterN > 1), cute::SM90_TMA_LOAD_MULTICAST, cute::SM90_TMA_LOAD>;
  using TmaLoadQdO = decltype(cute::make_tma_copy(TmaOpQdO{}, GmemTensor{}, cute::take<0, 2>(SmemLayoutQdO{}),
                                                  cute::Shape<Int_M, Int_D>{}, cute::Int<kClusterN>{}));
  using TmaLoadKV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutKV{},
                                                 cute::Shape<Int_N, Int_D>{}, cute::_1{}));
  static constexpr uint32_t kTmaBytesQ = sizeof(Element) * kBlockM * kHeadDim;
  static constexpr uint32_t kTmaBytesKV = sizeof(Element) * kBlockN * kHeadDim;

  // 1024-byte alignment: the period of the 128-byte swizzle, which TMA and wgmma both assume.
  static constexpr int kSmemAlign = 1024;
};

}  // namespace flashtrain::cuda::sm90
