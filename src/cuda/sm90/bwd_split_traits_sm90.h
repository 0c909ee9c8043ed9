// Compile-time shape of the sm90a backward for head dims whose dK and dV accumulators do not fit
// one warpgroup's registers (D = 256: 64 keys x 256 x 2 fp32 would be 256 registers a thread).
// The two consumer warpgroups split the head dim instead of the keys ("split-D"):
//   S^T = K Q^T, dP^T = V dO^T   keys x queries (64 x 64), warpgroup w computes queries
//                                 [32 w, 32 w + 32) (K and V are read whole by both);
//   P^T, dS^T                    rounded into shared memory, each warpgroup its queries, since
//                                 both need every query of them;
//   dV += P^T dO, dK += dS^T Q   keys x D, warpgroup w owns columns [128 w, 128 w + 128) (64 + 64
//                                 registers), both operands from shared memory;
//   dQ = dS K                    queries x D, warpgroup w its 128 columns, added into dq_accum
//                                 straight from registers with vector atomics (a 64 x 256 fp32
//                                 staging tile would not fit next to two Q / dO stages).
// Tiles: 64 key rows per block (the sm80 plan's 64 x 64 tile for D > 128, bwd_plan.h) and 64
// query rows per step. bf16 inputs compute dQ from bf16 dS and K, as the sm80 path does: the
// scaled fp16 copies of the 64 / 128 kernels (bwd_ds_scale_sm90.h) would need 40 KB more.
#pragma once
#include <cstdint>

#include "bwd_traits_base_sm90.h"

namespace flashtrain::cuda::sm90 {

// kClusterN_ = 2: the cluster-pair kernel (bwd_split_kernel_sm90.h, default mode only).
template <int kHeadDim_, typename Element_, int kClusterN_ = 1>
struct BwdSplitTraits : BwdTraitsBase<kHeadDim_, Element_, 64, 64, 2, kClusterN_> {
  using Base = BwdTraitsBase<kHeadDim_, Element_, 64, 64, 2, kClusterN_>;
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
  static_assert(kHeadDim == 256, "sm90 split-D backward: head dim 256");
  static constexpr bool kSplitD = true;
  static constexpr bool kScaledDs = false;  // bwd_fetch_stats: no fp16 dS scales
  using ElementdQ = Element;

  static constexpr int kStagesPdS = 2;  // P^T and dS^T buffers: step t writes t % 2
  static constexpr int kColsPerWarpGroup = kHeadDim / kNumMmaWarpGroups;
  static constexpr int kQueriesPerWarpGroup = kBlockM / kNumMmaWarpGroups;
  using WarpGroupsAlongN = cute::Layout<cute::Shape<cute::_1, cute::Int<kNumMmaWarpGroups>, cute::_1>>;

  // S^T = K Q^T and dP^T = V dO^T: (keys x queries x D), both operands K-major; the warpgroups
  // split the queries.
  using TileShapeSdP = cute::Shape<Int_N, Int_M, Int_D>;
  using TiledMmaSdP = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum,
                                 cute::Shape<Int_N, cute::Int<kQueriesPerWarpGroup>, Int_D>>(),
      WarpGroupsAlongN{}));
  // dV += P^T dO and dK += dS^T Q: (keys x D x queries); A = P^T / dS^T from shared memory (queries
  // contiguous, K-major), B = dO / Q read transposed (MN-major); the warpgroups split D.
  using TiledMmadKV = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, cute::Shape<Int_N, cute::Int<kColsPerWarpGroup>, Int_M>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      WarpGroupsAlongN{}));
  // dQ = dS K: (queries x D x keys); A = dS (the dS^T buffer read transposed, MN-major), B = K read
  // transposed (MN-major); the warpgroups split D.
  using TiledMmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, cute::Shape<Int_M, cute::Int<kColsPerWarpGroup>, Int_N>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>(),
      WarpGroupsAlongN{}));

  // P^T and dS^T (keys x queries x buffer), queries contiguous: the A operands of the dV / dK GEMMs.
  static_assert(kBlockM == cute::size<1>(SmemAtomK{}), "one swizzle row of queries");
  using SmemLayoutPdS = decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<Int_N, Int_M, cute::Int<kStagesPdS>>{}));
  // dS (queries x keys x buffer) over dS^T's bytes: the A operand of dQ = dS K.
  using SmemLayoutdSt = decltype(cute::composition(
      SmemLayoutPdS{}, cute::make_ordered_layout(cute::Shape<Int_M, Int_N, cute::Int<kStagesPdS>>{},
                                                 cute::Step<cute::_2, cute::_1, cute::_3>{})));

  struct NoDqTma {};  // dQ goes into dq_accum by atomics, not TMA reductions
  using TmaReducedQ = NoDqTma;

  // K 32 + V 32 + Q 64 + dO 64 + P^T 16 + dS^T 16 = 224 KB of the 227 KB a block may use.
  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQdO>, kSmemAlign> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQdO>, kSmemAlign> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutPdS>, kSmemAlign> p;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutPdS>, kSmemAlign> ds;
    float lse_log2[kStages][kBlockM];  // lse * log2(e) (+inf past the sequence)
    float dsum[kStages][kBlockM];      // D = rowsum(dO * O) (0 past the sequence)
    // mbarriers as in BwdTraits: a stage is full when its TMA bytes have landed and every
    // statistics thread has written, empty when every consumer thread is done with it.
    uint64_t kv_full;
    uint64_t qdo_full[kStages];
    uint64_t stats_full[kStages];
    uint64_t stage_empty[kStages];
    // Cluster pair: the peer block's producer tells this one that the peer's consumers are done
    // with a stage (both blocks' copies of it are overwritten by each block's multicast).
    uint64_t peer_empty[kStages];
    // Cluster pair summing dQ: the peer's half of this block's dQ columns has landed in the step's
    // dO buffer (st.async bytes), and the peer's buffer may take this block's half.
    uint64_t dq_recv_full;
    uint64_t dq_send_free;
    // Deterministic: a step's dQ atomics are issued by every consumer thread (dq_issued, by step
    // parity), and its turn has been passed on by the producer's turn warp (dq_passed), after
    // which the consumers may issue the atomics of the step two later.
    uint64_t dq_issued[2];
    uint64_t dq_passed[2];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the 227 KB a Hopper block may use");
};

// Named barriers of the split-D backward's consumers (ids after CUTLASS's reserved ones).
enum class BwdSplitBarrier : uint32_t {
  kPWritten = 0,   // both warpgroups' P^T of the step in shared memory
  kDsWritten = 1,  // both warpgroups' dS^T of the step in shared memory
  kDqTurn = 2,     // kDeterministic: the step's dQ turn taken (a cluster pair summing dQ: by the owner warpgroup)
  kDvRetired = 3,  // cluster pair summing dQ: both warpgroups' dV GEMMs of the step have completed
};

}  // namespace flashtrain::cuda::sm90
