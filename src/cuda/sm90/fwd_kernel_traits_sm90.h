// Compile-time shape of the sm90a forward kernel for one (head dim, element type): tile sizes,
// warp roles and register budgets, the two wgmma tiled MMAs, shared-memory layouts and the TMA
// copy types.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>

#include "fwd_args_sm90.h"

namespace flashtrain::cuda::sm90 {

// kBlockN_: keys per K/V tile. The default suits every mask and length; D = 128 without a mask
// also has long_key_tile(D) (FwdArgs::key_tile, fwd_args_sm90.h). kBlockM_: query rows of a
// work tile, 64 per consumer warpgroup (fwd_block_m).
template <int kHeadDim_, typename Element_, int kBlockN_ = (kHeadDim_ <= 128 ? 128 : 64),
          int kBlockM_ = fwd_block_m(kHeadDim_)>
struct FwdTraits {
  using Element = Element_;
  using ElementAccum = float;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "sm90 forward: head dim must be 64, 128 or 256");
  static_assert(cute::is_same_v<Element, cutlass::half_t> || cute::is_same_v<Element, cutlass::bfloat16_t>,
                "sm90 forward: element type must be fp16 or bf16");

  // One 64-row wgmma slab per consumer warpgroup.
  static constexpr int kRowsPerWarpGroup = 64;
  static constexpr int kBlockM = kBlockM_;
  // Register budget of a consumer: O (64 x D fp32 over 128 threads) plus the S tile in flight
  // plus P. D = 256 keeps S at 64 columns so O (128 regs) + S (32) + next S (32) + P (16) fit in
  // 240; D = 128 with 176 columns: O 64 + S 88 + P 44 (ptxas: 8 bytes spilled outside the main
  // loop); D = 64 with three consumers (160 registers): O 32 + S 64 + P 32.
  // A longer K tile spreads each tile's fixed costs (barrier waits, the ping-pong hand-over, the
  // rescale of O) over more keys.
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "K tile: a multiple of wgmma's k (16), at most its n (256)");
  // Two K and two V buffers: one being read by the tensor cores while TMA fills the other.
  // D = 256: Q 64 KB + K 64 KB + V 64 KB = 192 KB of the 227 KB a block may use.
  static constexpr int kStages = 2;

  static constexpr int kNumMmaWarpGroups = kBlockM / kRowsPerWarpGroup;
  static_assert(kBlockM % kRowsPerWarpGroup == 0 && (kNumMmaWarpGroups == 2 || kNumMmaWarpGroups == 3),
                "the turn-taking schedule is written for two or three consumer warpgroups");
  static_assert(kNumMmaWarpGroups == 2 || kBlockN <= 128, "three consumers hold S, P and O in 160 registers: 128 keys");
  static constexpr int kThreadsPerWarpGroup = cutlass::NumThreadsPerWarpGroup;
  static constexpr int kNumMmaThreads = kNumMmaWarpGroups * kThreadsPerWarpGroup;
  static constexpr int kNumThreads = kNumMmaThreads + kThreadsPerWarpGroup;  // + 1 producer warpgroup
  // setmaxnreg budgets: the producer only issues TMA, the consumers hold the accumulators.
  // 24 * 128 + 240 * 256 = 64512 (two consumers) and 24 * 128 + 160 * 384 = 64512 (three) <= the
  // 65536 registers of an SM.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kNumMmaWarpGroups == 2 ? 240 : 160;
  static_assert(kProducerRegs * kThreadsPerWarpGroup + kConsumerRegs * kNumMmaThreads <= 65536,
                "register budgets exceed the register file");

  using TileShapeQK = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kHeadDim>>;  // S = Q K^T
  using TileShapePV = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>, cute::Int<kBlockN>>;  // O = P V
  using AtomLayoutMNK = cute::Layout<cute::Shape<cute::Int<kNumMmaWarpGroups>, cute::_1, cute::_1>>;
  // Q and K from shared memory; V from shared memory read transposed (MN-major); P from registers
  // (the converted S accumulator).
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, TileShapeQK>(), AtomLayoutMNK{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, ElementAccum, TileShapePV, cute::GMMA::Major::K,
                                 cute::GMMA::Major::MN>(),
      AtomLayoutMNK{}));

  // 128-byte swizzle: every head dim here is a multiple of its 64-element row.
  using SmemAtom = cute::GMMA::Layout_K_SW128_Atom<Element>;
  static_assert(kHeadDim % cute::size<1>(SmemAtom{}) == 0, "head dim must be a multiple of the swizzle row");
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  using SmemLayoutV = SmemLayoutK;
  // V^T (D x kBlockN x stages) over the same bytes as V: the B operand of O = P V.
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutV{}, cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                               cute::Step<cute::_2, cute::_1, cute::_3>{})));
  // The output tile is staged in shared memory for one TMA store. In its own buffer where that
  // fits, so the next tile's Q can land while this tile's epilogue runs. Otherwise (D = 256: 64 +
  // 128 + 64 KB; D = 128 with 176-key tiles: 32 + 176 + 32 KB) in Q's buffer, free once both
  // warpgroups finished their last S GEMM; the next Q then waits for the store. (1 KB: the
  // mbarriers and the buffers' alignment.)
  using SmemLayoutO = SmemLayoutQ;
  static constexpr bool kSeparateO =
      sizeof(Element) * (2 * cute::cosize_v<SmemLayoutQ> + 2 * cute::cosize_v<SmemLayoutK>) + 1024 <= 227 * 1024;
  // stmatrix of O's 16-bit accumulator fragments in the epilogue.
  using SmemCopyAtomO = cute::Copy_Atom<cute::SM90_U32x4_STSM_N, Element>;

  // Global tensors as (seq, dim, head, batch); dim is the contiguous one.
  using ShapeQKV = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using StrideQKV = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GmemLayoutQKV = cute::Layout<ShapeQKV, StrideQKV>;

  using TmaLoadQ = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{}, cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemLayoutQKV{}),
      SmemLayoutQ{}, cute::select<0, 2>(TileShapeQK{}), cute::_1{}));
  using TmaLoadKV = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{}, cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemLayoutQKV{}),
      cute::take<0, 2>(SmemLayoutK{}), cute::select<1, 2>(TileShapeQK{}), cute::_1{}));
  using TmaStoreO = decltype(cute::make_tma_copy(
      cute::SM90_TMA_STORE{}, cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)), GmemLayoutQKV{}),
      SmemLayoutO{}, cute::select<0, 2>(TileShapeQK{}), cute::_1{}));

  static constexpr uint32_t kTmaBytesQ = sizeof(Element) * cute::size(SmemLayoutQ{});
  static constexpr uint32_t kTmaBytesKV = sizeof(Element) * cute::size(cute::take<0, 2>(SmemLayoutK{}));

  // 1024-byte alignment: the period of the 128-byte swizzle, which TMA and wgmma both assume.
  static constexpr int kSmemAlign = 1024;
  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, kSmemAlign> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, kSmemAlign> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutV>, kSmemAlign> v;
    cute::array_aligned<Element, kSeparateO ? cute::cosize_v<SmemLayoutO> : 1, kSmemAlign> o;
    uint64_t q_full;             // TMA of Q landed
    uint64_t q_empty;            // Q's buffer may be overwritten by the next tile's Q
    uint64_t k_full[kStages];    // TMA of a K tile landed
    uint64_t k_empty[kStages];   // every consumer thread finished reading a K tile
    uint64_t v_full[kStages];
    uint64_t v_empty[kStages];
    // Dynamic tile claims (fwd_tile_scheduler_sm90.h): the producer's n-th claimed index in slot
    // n % 2, published by tile_full[n % 2], read by every consumer thread before tile_empty.
    int tile_index[2];
    uint64_t tile_full[2];
    uint64_t tile_empty[2];

    __device__ Element* o_data() { return kSeparateO ? o.data() : q.data(); }
  };
  // Arrivals that free Q's buffer: every consumer thread after its last S GEMM (separate O), or
  // the thread that issued the O store once the store has read shared memory (O in Q's buffer).
  static constexpr int kQEmptyArrivals = kSeparateO ? kNumMmaThreads : 1;
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the 227 KB a Hopper block may use");
};

}  // namespace flashtrain::cuda::sm90

namespace flashtrain::cuda::sm90 {

// Named hardware barriers of the consumer warpgroups (ids after the ones CUTLASS reserves).
enum class FwdBarrier : uint32_t {
  kSchedulerWG0 = 0,  // warpgroup 0 may issue its next GEMMs (warpgroup w: kSchedulerWG0 + w)
  kSchedulerWG1 = 1,
  kSchedulerWG2 = 2,  // (three consumers only)
  kEpilogue = 3,      // every consumer warpgroup at the same point of the epilogue
};

}  // namespace flashtrain::cuda::sm90
