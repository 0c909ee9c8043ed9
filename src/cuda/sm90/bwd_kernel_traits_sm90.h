// Compile-time shape of the sm90a backward main kernel for one (head dim, element type): tile
// sizes, the four wgmma tiled MMAs, shared-memory layouts and the TMA copy types.
//
// One block owns a kBlockN = 128 row KV tile and walks the kBlockM-row Q tiles that see it. A
// producer warpgroup loads (Q, dO, row statistics) and adds dQ into dq_accum; two consumer
// warpgroups split the KV tile: consumer w owns key rows [64 w, 64 w + 64), so it computes the
// transposed tiles S^T = K Q^T and dP^T = V dO^T of its keys, keeps dK and dV of its keys in
// registers and feeds P^T / dS^T from registers straight into the dV / dK GEMMs. dQ = dS K needs
// every key, so dS^T goes through shared memory (two buffers, so that one warpgroup may write the
// next step's while the other still reads this one's); the two consumers split dQ's columns and
// stage them in shared memory, from where the producer's dQ warp adds them by TMA reductions.
#pragma once
#include <cstdint>

#include "bwd_traits_base_sm90.h"

namespace flashtrain::cuda::sm90 {

// Query rows per step: D = 64 takes 128 so each step's GEMMs are big enough to amortise its
// barriers, waits and row-statistic loads. The grid (KV tiles of kBlockN = 128) and the dQ
// semaphores come from the sm80 plan (bwd_plan.h), whose 64-row Q tiles are at least as many as
// these. (With kBlockM = 64 at D = 64 the backward ran 15-25% slower on the H200, S 1k-4k.)
template <int kHeadDim_, typename Element_>
struct BwdTraits : BwdTraitsBase<kHeadDim_, Element_, kHeadDim_ <= 64 ? 128 : 64, 128, 2> {
  using Base = BwdTraitsBase<kHeadDim_, Element_, kHeadDim_ <= 64 ? 128 : 64, 128, 2>;
  using typename Base::Element;
  using typename Base::ElementAccum;
  using typename Base::Int_M;
  using typename Base::Int_N;
  using typename Base::Int_D;
  using typename Base::SmemLayoutKV;
  using typename Base::SmemLayoutQdO;
  using typename Base::GmemLayoutQKV;
  using Base::kHeadDim;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kStages;
  using Base::kNumMmaWarpGroups;
  using Base::kNumMmaThreads;
  using Base::kSmemAlign;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "sm90 backward: head dim must be 64 or 128");

  static constexpr int kStagesdS = 2;  // dS buffers: step t writes t % 2 (read by dQ(t) in step t + 1)
  static constexpr int kKeysPerWarpGroup = kBlockN / kNumMmaWarpGroups;
  static_assert(kKeysPerWarpGroup == 64, "one 64-row wgmma slab of keys per warpgroup");

  // bf16 inputs: dQ = dS K reads dS and a copy of K in fp16, scaled by powers of two
  // (bwd_ds_scale_sm90.h). fp16 inputs read their own dS and K.
  static constexpr bool kScaledDs = cute::is_same_v<Element, cutlass::bfloat16_t>;
  static constexpr bool kSplitD = false;  // the consumers split the keys (bwd_split_traits_sm90.h splits D)
  using ElementdQ = cutlass::half_t;  // the dQ GEMM's operands

  // S^T = K Q^T and dP^T = V dO^T: (keys x queries x D), both operands K-major in shared memory.
  using TileShapeSdP = cute::Shape<Int_N, Int_M, Int_D>;
  using TiledMmaSdP = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, ElementAccum, TileShapeSdP>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  // dV += P^T dO and dK += dS^T Q: (keys x D x queries); A = P^T / dS^T from registers, B = dO /
  // Q read transposed (D contiguous, so MN-major).
  using TileShapedKV = cute::Shape<Int_N, Int_D, Int_M>;
  using TiledMmadKV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, ElementAccum, TileShapedKV, cute::GMMA::Major::K,
                                 cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  // dQ = dS K: (queries x D x keys); the warpgroups split D. A = dS from shared memory (queries
  // contiguous, MN-major), B = K (bf16 inputs: its fp16 copy) read transposed (MN-major).
  using TileShapedQAtom = cute::Shape<Int_M, cute::Int<kHeadDim / kNumMmaWarpGroups>, Int_N>;
  using TileShapedQ = cute::Shape<Int_M, Int_D, Int_N>;
  using TiledMmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementdQ, ElementdQ, ElementAccum, TileShapedQAtom, cute::GMMA::Major::MN,
                                 cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::_1, cute::_2, cute::_1>>{}));

  // dS (queries x keys x buffer), queries contiguous: written from the dS^T accumulators (whose
  // register pairs are adjacent queries) and read as the MN-major A operand of dQ = dS K.
  using SmemAtomdS = cute::GMMA::Layout_MN_SW128_Atom<ElementdQ>;  // 64 x 8 elements, queries contiguous
  using SmemLayoutdS = decltype(cute::tile_to_shape(SmemAtomdS{}, cute::Shape<Int_M, Int_N, cute::Int<kStagesdS>>{}));
  // dS^T (keys x queries x buffer) over the same bytes: what bwd_smem_stores_sm90.h's dS offsets
  // must agree with (tests/cpp/sm90_smem_layout_test.cu).
  using SmemLayoutdSt = decltype(cute::composition(
      SmemLayoutdS{}, cute::make_layout(cute::Shape<Int_N, Int_M, cute::Int<kStagesdS>>{},
                                        cute::Stride<Int_M, cute::_1, cute::Int<kBlockM * kBlockN>>{})));

  // The step's dQ (scale * dS K, fp32) is staged in shared memory, 128-byte swizzled in boxes of
  // 32 columns, in the staged column order (common/dq_column_order.h: the accumulator's 64-bit
  // stores then hit distinct banks), and added into dq_accum by TMA reductions
  // (cp.reduce.async.bulk.tensor .add), one per box; consumer w writes the boxes of its columns
  // [w D / 2, (w + 1) D / 2), which are the first / second half of the staging memory.
  static constexpr int kDqBoxCols = 32;
  using SmemAtomdQ = cute::GMMA::Layout_K_SW128_Atom<float>;  // 8 x 32 floats
  using SmemLayoutdQ = decltype(cute::tile_to_shape(SmemAtomdQ{}, cute::Shape<Int_M, Int_D>{}));
  // dQ's logical columns over SmemLayoutdQ's staged ones: column 4 j + e of a box (j = 2 a + b) at
  // staged column 4 staged_dq_chunk(j) + e = e + 16 b + 4 a. What bwd_smem_stores_sm90.h's dQ
  // offsets must agree with (tests/cpp/sm90_smem_layout_test.cu).
  using DqColumnOrder = cute::Layout<cute::Shape<cute::_4, cute::_2, cute::_4, cute::Int<kHeadDim / 32>>,
                                     cute::Stride<cute::_1, cute::_16, cute::_4, cute::_32>>;
  using SmemLayoutdQLogical =
      decltype(cute::composition(SmemLayoutdQ{}, cute::make_tile(cute::make_layout(Int_M{}), DqColumnOrder{})));
  using SmemLayoutdQBox = decltype(cute::tile_to_shape(SmemAtomdQ{}, cute::Shape<Int_M, cute::Int<kDqBoxCols>>{}));

  using GmemTensordQ = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<float*>(nullptr)),
                                                  GmemLayoutQKV{}));
  // dq_accum [B * Sq][Hq][D] viewed as (Sq, D, Hq, B): a box past Sq is clipped, not added.
  using TmaReducedQ = decltype(cute::make_tma_copy(cute::SM90_TMA_REDUCE_ADD{}, GmemTensordQ{}, SmemLayoutdQBox{},
                                                   cute::Shape<Int_M, cute::Int<kDqBoxCols>>{}, cute::_1{}));

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, kSmemAlign> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQdO>, kSmemAlign> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQdO>, kSmemAlign> dout;
    cute::array_aligned<ElementdQ, cute::cosize_v<SmemLayoutdS>, kSmemAlign> ds;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutdQ>, kSmemAlign> dq;
    // K * 2^eK in fp16 (kScaledDs; one vector otherwise).
    cute::array_aligned<ElementdQ, kScaledDs ? cute::cosize_v<SmemLayoutKV> : 8, kSmemAlign> k_dq;
    // Row statistics of the stage's rows, written by the producer's statistics warps.
    float lse_log2[kStages][kBlockM];  // lse * log2(e) (+inf past the sequence)
    float dsum[kStages][kBlockM];      // D = rowsum(dO * O) (0 past the sequence)
    float ds_scale[kStages][kBlockM];  // kScaledDs: s_i (bwd_ds_scale_sm90.h; 1 past the sequence)
    // kScaledDs: step t's dQ row factors dq_scale / s_i in slot t % 3, read in step t + 1 (after the
    // step's stage is released; kDeterministic: in step t): a slot is rewritten for step t + 3, once
    // step t + 1's stage is released.
    float dq_factor[kScaledDs ? 3 : 1][kBlockM];
    float scratch[2 * kNumMmaThreads / 32];  // the reduction of K's and V's maxima (bwd_ds_scale_sm90.h)
    float v_max;                             // kScaledDs: the tile's max |V|
    float dq_scale;                          // the dQ staging's factor before 1 / s_i: scale (* 2^-eK)
    // mbarriers, each thread of a role arriving for itself. A stage (Q, dO and their row
    // statistics) is full when its TMA bytes have landed and every statistics thread has written,
    // empty when every consumer thread is done with it. The dQ staging tile is full when every
    // consumer thread has written it, empty when the dQ warp's reductions have read it.
    uint64_t kv_full;
    uint64_t qdo_full[kStages];
    uint64_t stats_full[kStages];
    uint64_t stage_empty[kStages];
    uint64_t dq_full;
    uint64_t dq_empty;
    uint64_t vmax_ready;  // kScaledDs, the consumers' copy: s.v_max and s.dq_scale set
    // A dS buffer is full when every consumer thread has written its keys' part, empty when every
    // consumer thread's dQ GEMM reading it has retired.
    uint64_t ds_full[kStagesdS];
    uint64_t ds_empty[kStagesdS];
    uint64_t stagger;  // the second consumer starts once the first has issued its first dV GEMM
    uint64_t kdq_ready;  // stats_copy_k: K's fp16 copy k_dq written, by every statistics thread
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the 227 KB a Hopper block may use");
};

// Named barriers of the backward (ids after CUTLASS's reserved ones).
enum class BwdBarrier : uint32_t {
  kDsWritten = 0,  // kDeterministic: both consumers' dS of the step in shared memory
  kPrologue = 1,   // the consumers' block reductions of K's and V's maxima
  kEpilogue0 = 2,  // + w: warpgroup w's dK / dV staging written / read (bwd_epilogue_sm90.h)
  kEpilogue1 = 3,
  kTileDone = 4,   // both consumers' wgmmas retired (a one-step tile's epilogue)
  kStatsMaxima = 5,  // stats_copy_k: the statistics warps' reduction of K's and V's maxima
};

}  // namespace flashtrain::cuda::sm90
