// Compile-time shape of the sm90a "wide key tile" backward for D = 256 (bwd_wide_kernel_sm90.h), the
// tile layout FlashAttention-3 uses at this head dim (read from its public launch template; no code
// taken): 80 keys a block, 64 queries a step, no cluster pair, the GEMMs oriented so that every
// accumulator fits one consumer warpgroup's registers:
//   S = Q K^T, dP = dO V^T     queries x keys (64 x 80), warpgroup w its keys [40 w, 40 w + 40):
//                              20 + 20 fp32 registers a thread;
//   P, dS                      rounded into shared memory (keys x queries, queries contiguous),
//                              each warpgroup its keys, since both need every key of them;
//   dV^T += dO^T P,            D x keys (256 x 80), warpgroup w its two 64-row slabs of D
//   dK^T += Q^T dS             (rows [64 w, 64 w + 64) and [128 + 64 w, 192 + 64 w)): 80 + 80;
//   dQ = dS K                  queries x D in two 128-column slices, warpgroup w 64 columns of
//                              each (32 registers), added into dq_accum from registers.
// Shared memory: K 40 + V 40 + two Q stages 64 + one dO stage 32 + two P and two dS buffers 40 =
// 216 KB. dO has one stage (both of its GEMMs run early in a step, so it is released mid-step, and
// the next step's load has the step's second half); Q two (its dK GEMM is a step's last).
#pragma once
#include <cstdint>

#include "bwd_traits_base_sm90.h"

namespace flashtrain::cuda::sm90 {

template <int kHeadDim_, typename Element_>
struct BwdWideTraits : BwdTraitsBase<kHeadDim_, Element_, 64, 80, 2> {
  using Base = BwdTraitsBase<kHeadDim_, Element_, 64, 80, 2>;
  using typename Base::Element;
  using typename Base::ElementAccum;
  using typename Base::Int_M;
  using typename Base::Int_N;
  using typename Base::Int_D;
  using typename Base::SmemAtomK;
  using typename Base::SmemLayoutKV;
  using typename Base::SmemLayoutQdO;
  using Base::kHeadDim;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kStages;
  using Base::kNumMmaWarpGroups;
  using Base::kSmemAlign;
  static_assert(kHeadDim == 256, "sm90 wide-key-tile backward: head dim 256");
  static constexpr bool kSplitD = true;    // dq_accum by atomics: no TMA reduction descriptor
  static constexpr bool kWideKeys = true;  // the launch plans 80-key tiles
  // Bands of at least 4 heads under causal masks: the L2 rule gives 1-2 at S 4k-16k, whose
  // head-after-head order leaves the last heads' longest 80-key tiles to the grid's tail (103
  // tiles a head at 8k on 132 SMs; bench/results/2026-12-07_run47/band_model.py: 1.048 / 1.055 /
  // 1.020 of the no-tail bound at 4k / 8k / 16k, bands of 4: 1.012 / 1.008 / 1.004). Measured on
  // an H100, bf16, against the L2 rule: backward 1.024 / 1.047 / 1.023x (run 47 call 1).
  static constexpr int kMinBandUnits = 4;
  static constexpr bool kScaledDs = false;  // bwd_fetch_stats: no fp16 dS scales (dQ from the 16-bit dS, as sm80)
  using ElementdQ = Element;

  static constexpr int kStagesPdS = 2;  // P and dS buffers: step t writes t % 2
  static constexpr int kKeysPerWarpGroup = kBlockN / kNumMmaWarpGroups;  // 40
  static constexpr int kDqSlices = 2;                                    // dQ's column slices
  static constexpr int kDqSliceCols = kHeadDim / kDqSlices;              // 128, 64 a warpgroup
  using Int_KeysWg = cute::Int<kKeysPerWarpGroup>;
  using WarpGroupsAlongN = cute::Layout<cute::Shape<cute::_1, cute::Int<kNumMmaWarpGroups>, cute::_1>>;
  using WarpGroupsAlongM = cute::Layout<cute::Shape<cute::Int<kNumMmaWarpGroups>, cute::_1, cute::_1>>;

  // S = Q K^T and dP = dO V^T: (queries x keys x D), both operands K-major; the warpgroups split the keys.
  using TileShapeSdP = cute::Shape<Int_M, Int_N>;
  using TiledMmaSdP = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, cute::Shape<Int_M, Int_KeysWg, Int_D>>(),
      WarpGroupsAlongN{}));
  // dV^T += dO^T P and dK^T += Q^T dS: (D x keys x queries); A = dO^T / Q^T (D contiguous,
  // MN-major), B = P / dS as (keys x queries), queries contiguous (K-major); the warpgroups
  // alternate over 64-row slabs of D.
  using TileShapedKV = cute::Shape<Int_D, Int_N>;
  using TiledMmadKV = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, cute::Shape<cute::_64, Int_N, Int_M>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::K>(),
      WarpGroupsAlongM{}));
  // dQ = dS K, one 128-column slice at a time: (queries x 128 x keys); A = dS (the dS buffer read
  // as queries x keys, MN-major), B = K's slice read transposed (D contiguous, MN-major).
  using TileShapedQSlice = cute::Shape<Int_M, cute::Int<kDqSliceCols>>;
  using TiledMmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum,
                                 cute::Shape<Int_M, cute::Int<kDqSliceCols / kNumMmaWarpGroups>, Int_N>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>(),
      WarpGroupsAlongN{}));

  // dO: one stage (same swizzle as Q's, so the one TMA descriptor shape serves both).
  using SmemLayoutdO = decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<Int_M, Int_D, cute::_1>{}));
  using SmemLayoutdOt = decltype(cute::composition(
      SmemLayoutdO{}, cute::make_ordered_layout(cute::Shape<Int_D, Int_M, cute::_1>{},
                                                cute::Step<cute::_2, cute::_1, cute::_3>{})));
  // P and dS (keys x queries x buffer), queries contiguous: the B operands of the dV / dK GEMMs.
  static_assert(kBlockM == cute::size<1>(SmemAtomK{}), "one swizzle row of queries");
  using SmemLayoutPdS = decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<Int_N, Int_M, cute::Int<kStagesPdS>>{}));
  // (queries x keys x buffer) over the same bytes: what the S / dP accumulators are stored through,
  // and dS as the A operand of dQ = dS K.
  using SmemLayoutPdSt = decltype(cute::composition(
      SmemLayoutPdS{}, cute::make_ordered_layout(cute::Shape<Int_M, Int_N, cute::Int<kStagesPdS>>{},
                                                 cute::Step<cute::_2, cute::_1, cute::_3>{})));

  struct NoDqTma {};  // dQ goes into dq_accum by atomics, not TMA reductions
  using TmaReducedQ = NoDqTma;

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQdO>, kSmemAlign> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdO>, kSmemAlign> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutPdS>, kSmemAlign> p;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutPdS>, kSmemAlign> ds;
    float lse_log2[kStages][kBlockM];  // lse * log2(e) (+inf past the sequence)
    float dsum[kStages][kBlockM];      // D = rowsum(dO * O) (0 past the sequence)
    // mbarriers. Q's stage (with its row statistics): qdo_full (Q's TMA bytes), stats_full (every
    // statistics thread wrote), stage_empty (every consumer thread is done with Q and the
    // statistics). dO's one buffer: do_full (its TMA bytes), do_empty (every consumer thread's dP
    // and dV GEMMs have retired).
    uint64_t kv_full;
    uint64_t qdo_full[kStages];
    uint64_t stats_full[kStages];
    uint64_t stage_empty[kStages];
    uint64_t do_full;
    uint64_t do_empty;
    // Deterministic: a step's dQ atomics are issued by every consumer thread (dq_issued, by step
    // parity), and its turn has been passed on by the producer's turn warp (dq_passed).
    uint64_t dq_issued[2];
    uint64_t dq_passed[2];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the 227 KB a Hopper block may use");
};

// Named barriers of the wide-key-tile backward's consumers (ids after CUTLASS's reserved ones).
enum class BwdWideBarrier : uint32_t {
  kPWritten = 0,   // both warpgroups' P of the step in shared memory
  kDsWritten = 1,  // both warpgroups' dS of the step in shared memory
  kDqTurn = 2,     // kDeterministic: the step's dQ turn taken
  kEpilogue = 3,   // dK / dV staged in K's and V's buffers (bwd_wide_epilogue_sm90.h)
};

}  // namespace flashtrain::cuda::sm90
