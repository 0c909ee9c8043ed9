// Backward stage 2 on Hopper for D = 256 with 80-key tiles (bwd_wide_traits_sm90.h), between the
// same sm80 preprocess and postprocess as the other sm90 main kernels. One block per key tile, no
// cluster pair; the producer warpgroup loads K and V once and each step's Q (two stages) and dO
// (one buffer) by TMA, its statistics warps fetch the row statistics (bwd_fetch_stats), and its
// warp 1 passes the deterministic dQ turns on (bwd_pass_dq_turns).
//
// Per step (one 64-row Q tile of one query head), consumer w (keys [40 w, 40 w + 40) of S and dP;
// 64-row slabs w and w + 2 of D for dK^T and dV^T; 64 columns of each 128-column dQ slice):
//   S  = Q K^T, dP = dO V^T        (wgmma, both in flight; dP also during the softmax)
//   P  = exp2(S * scale log2e - lse log2e)  -> shared memory, then a barrier of both consumers
//   dV^T += dO^T P                 (wgmma, in flight while dS is computed and published)
//   dS = P * (dP - D)              -> shared memory, then a barrier of both consumers
//   dQ slice 0 = dS K[:, 0:128], dK^T's first slab, dQ slice 1 = dS K[:, 128:256], dK^T's second
//   slab (wgmma; dK^T += Q^T dS issued as its two 64-row slabs of D): each dQ slice, once retired,
//   times scale added into dq_accum by 16-byte reductions (bwd_dq_atomics_sm90.h) while the slab
//   issued behind it runs (kDeterministic: in the step's turn of tile_range.h's schedule, taken
//   by one thread before slice 0's and held through slice 1's). Once slice 0 has retired so has
//   dV^T, and dO's buffer is released for the next step's load.
// Q's stage and its row statistics are released at the top of the next step, once its S GEMM is
// issued and the second dK^T slab (the last reader of Q) has retired. P and dS alternate between
// two buffers by step parity: a consumer writes step t + 1's while the other may still read step
// t's (every GEMM reading a step's buffers has retired before the consumer that issued it passes
// step t + 1's first barrier, which comes before step t + 2's writes).
// dK (times scale) and dV are written once at the end (bwd_wide_epilogue_sm90.h).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "../../common/mask.h"
#include "../common/mask_tile.h"
#include "../sm80/bwd_epilogue.h"
#include "../sm80/bwd_params.h"
#include "bwd_dq_atomics_sm90.h"
#include "bwd_params_sm90.h"
#include "bwd_producer_sm90.h"
#include "bwd_smem_stores_sm90.h"
#include "bwd_softmax_sm90.h"
#include "bwd_wide_epilogue_sm90.h"
#include "bwd_wide_traits_sm90.h"
#include "device_code_sm90.h"
#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

// One thread of the producer: K and V of the block's key tile, then each step's Q into its stage
// (once the consumers released the step kStages earlier) and dO into the one buffer (once they
// released the step before's: their dP and dV^T GEMMs have retired).
template <class Traits>
__device__ __forceinline__ void bwd_wide_load_tiles(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& s,
                                                    const BwdWalk& walk, int b, int hk, int n_block) {
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM, kHeadDim = Traits::kHeadDim;
  bwd_load_kv<Traits>(kp, s, b, hk, n_block);

  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdO{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutdO{});
  auto cta_q = kp.tma_q.get_slice(_0{});
  auto cta_do = kp.tma_do.get_slice(_0{});
  DqWalkPos pos = walk.first;
  for (int step = 0; step < walk.num_steps; ++step) {
    const int stage = step % Traits::kStages;
    // TMA zero-fills rows past Sq.
    Tensor mQ = kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor mdO = kp.tma_do.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    Tensor gdO = local_tile(mdO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    if (step >= Traits::kStages) ClusterBarrier::wait(&s.stage_empty[stage], stage_free_parity<Traits>(step));
    ClusterTransactionBarrier::arrive_and_expect_tx(&s.qdo_full[stage], Traits::kTmaBytesQ);
    copy(kp.tma_q.with(s.qdo_full[stage]), cta_q.partition_S(gQ), cta_q.partition_D(sQ(_, _, stage)));
    if (step >= 1) ClusterBarrier::wait(&s.do_empty, static_cast<uint32_t>((step - 1) & 1));
    ClusterTransactionBarrier::arrive_and_expect_tx(&s.do_full, Traits::kTmaBytesQ);
    copy(kp.tma_do.with(s.do_full), cta_do.partition_S(gdO), cta_do.partition_D(sdO(_, _, 0)));
    pos = walk.next(pos);
  }
}

template <class Traits, bool kDeterministic>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    bwd_wide_kernel_sm90(const __grid_constant__ BwdKernelParams<Traits> kp) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::NamedBarrier;
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  constexpr int kMmaThreads = Traits::kNumMmaThreads;
  constexpr int kSliceCols = Traits::kDqSliceCols;
  using TileSdP = typename Traits::TileShapeSdP;
  static_assert(Traits::kStagesPdS == 2, "P / dS buffers alternate by step parity");

  const sm80::BwdParams& p = kp.p;
  extern __shared__ __align__(Traits::kSmemAlign) char smem[];
  SharedStorage& s = *reinterpret_cast<SharedStorage*>(smem);

  const int tid = static_cast<int>(threadIdx.x);
  int n_block, b, head_z;
  bwd_block_coords(kp, p.heads_k * p.head_chunks, n_block, b, head_z);
  const int hk = head_z / p.head_chunks;
  const int hq_begin = hk * p.group + (head_z % p.head_chunks) * p.heads_per_chunk;
  const sm80::SeqGeometry geo(p, b);
  const int n0 = n_block * kBlockN;
  if (n0 >= geo.len_k) return;
  const MaskSpec mask = geo.mask(p);
  const BwdWalk walk = make_bwd_walk<kBlockM, kBlockN>(p, mask, geo.len_q, n_block, n0, hq_begin);
  const int num_steps = walk.num_steps;

  const int warp = tid / 32;
  if (warp == 0 && cute::elect_one_sync()) {
    init_load_barriers<Traits>(kp, s);
    ClusterBarrier::init(&s.do_full, 1);
    ClusterBarrier::init(&s.do_empty, kMmaThreads);
    if constexpr (kDeterministic) {
      for (int i = 0; i < 2; ++i) {
        ClusterBarrier::init(&s.dq_issued[i], kMmaThreads);
        ClusterBarrier::init(&s.dq_passed[i], 1);
      }
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (tid < Traits::kThreadsPerWarpGroup) {  // ---- the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp == 0) {
      if (num_steps > 0 && cute::elect_one_sync()) bwd_wide_load_tiles<Traits>(kp, s, walk, b, hk, n_block);
    } else if (warp == 1) {
      if (kDeterministic && tid % 32 == 0) bwd_pass_dq_turns<Traits>(p, s, walk, b, 1);
    } else if (warp >= Traits::kStatsWarp) {
      bwd_fetch_stats<Traits, /*kStatsCopyK=*/false>(p, geo, s, walk, tid - Traits::kStatsWarp * 32);
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int mma_tid = tid - Traits::kThreadsPerWarpGroup;

  // ---- shared memory ----------------------------------------------------------------------
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sKt = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKt{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdO{});
  Tensor sQt = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdOt{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutdO{});
  Tensor sdOt = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutdOt{});
  Tensor sP = make_tensor(make_smem_ptr(s.p.data()), typename Traits::SmemLayoutPdS{});
  Tensor sdS = make_tensor(make_smem_ptr(s.ds.data()), typename Traits::SmemLayoutPdS{});
  Tensor sdSt = make_tensor(make_smem_ptr(s.ds.data()), typename Traits::SmemLayoutPdSt{});

  // ---- MMA partitions ----------------------------------------------------------------------
  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_tid);
  auto thr_dkv = mma_dkv.get_thread_slice(mma_tid);
  auto thr_dq = mma_dq.get_thread_slice(mma_tid);

  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ);  // (MMA, MMA_M, MMA_K, stages)
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);  // this warpgroup's keys
  Tensor tdPrdO = thr_sdp.partition_fragment_A(sdO);
  Tensor tdPrV = thr_sdp.partition_fragment_B(sV);
  Tensor tdVrdOt = thr_dkv.partition_fragment_A(sdOt);  // this warpgroup's slabs of D
  Tensor tdVrP = thr_dkv.partition_fragment_B(sP);      // (MMA, MMA_N, MMA_K, buffers)
  Tensor tdKrQt = thr_dkv.partition_fragment_A(sQt);
  Tensor tdKrdS = thr_dkv.partition_fragment_B(sdS);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdSt);  // (MMA, MMA_M, MMA_K, buffers)
  // K^T's two column slices (D x keys each), this warpgroup's half of each.
  Tensor tdQrKt0 = thr_dq.partition_fragment_B(local_tile(sKt, Shape<Int<kSliceCols>, Int<kBlockN>>{}, make_coord(0, 0)));
  Tensor tdQrKt1 = thr_dq.partition_fragment_B(local_tile(sKt, Shape<Int<kSliceCols>, Int<kBlockN>>{}, make_coord(1, 0)));

  Tensor acc_dkt = partition_fragment_C(mma_dkv, typename Traits::TileShapedKV{});
  Tensor acc_dvt = partition_fragment_C(mma_dkv, typename Traits::TileShapedKV{});
  clear(acc_dkt);
  clear(acc_dvt);

  // (query, key) coordinates of this thread's S elements inside the tile.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileSdP{}));
  Tensor coords = make_tensor(tScS.data(), accumulator_rowcol(tScS.layout()));

  // Both consumers' 16-bit tile of the step in a P / dS buffer (bwd_smem_stores_sm90.h), visible
  // to the wgmmas.
  const uint32_t p_smem = cute::cast_smem_ptr_to_uint(s.p.data());
  const uint32_t ds_smem = cute::cast_smem_ptr_to_uint(s.ds.data());
  auto publish = [&](auto const& acc, uint32_t smem, int buffer, BwdWideBarrier barrier) {
    Tensor rounded = make_tensor_like<Element>(acc);
    convert_fragment(acc, rounded);
    store_pds_wide<Traits>(smem, rounded, buffer, mma_tid);
    cutlass::arch::fence_view_async_shared();  // generic stores visible to the async proxy
    NamedBarrier::sync(kMmaThreads, static_cast<uint32_t>(barrier));
  };

  // Deterministic: one thread takes the step's dQ turn at Q tile (at, m0) once the turn warp has
  // passed step - 2's on (dq_issued's slot is free).
  auto take_dq_turn = [&](int step, const DqWalkPos& at, int m0) {
    if (step >= 2) ClusterBarrier::wait(&s.dq_passed[step % 2], static_cast<uint32_t>((step / 2 - 1) & 1));
    int* sema = sm80::dq_semaphore(p, b, at.head, at.m_block);
    sm80::spin_until_dq_turn(sema, dq_turn(mask, p.dq_rotated, n_block, m0, min(m0 + kBlockM, geo.len_q), kBlockN));
  };
  // scale * slice `slice` of dQ into dq_accum's Q tile m0 of query head `head` (rows past the
  // sequence left out).
  auto add_dq_slice = [&](auto& acc, int slice, int head, int m0) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) acc(i) *= p.scale;
    float* tile = p.dq_accum + (static_cast<int64_t>(geo.row_q + m0) * p.heads_q + head) * kHeadDim + slice * kSliceCols;
    add_rows_reduce_quads<kBlockM, kSliceCols>(tile, static_cast<int64_t>(p.heads_q) * kHeadDim, thr_dq, acc,
                                               geo.len_q - m0, mma_tid % 32);
  };

  if (num_steps > 0) ClusterBarrier::wait(&s.kv_full, 0);
  DqWalkPos pos = walk.first;
  CUTLASS_PRAGMA_NO_UNROLL
  for (int step = 0; step < num_steps; ++step) {
    const int stage = step % kStages;
    const int buf = step % Traits::kStagesPdS;
    const int m0 = pos.m_block * kBlockM;
    const uint32_t stage_parity = static_cast<uint32_t>((step / kStages) & 1);
    const uint32_t step_parity = static_cast<uint32_t>(step & 1);

    ClusterBarrier::wait(&s.qdo_full[stage], stage_parity);
    Tensor tSrS = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tSrQ(_, _, _, stage), tSrK, tSrS);
    // Every wait unconditional (at step 0 nothing but this S is in flight): a wait that only some
    // paths take makes ptxas inject its own and serialise the wgmmas (C7517 / C7518).
    warpgroup_wait<1>();  // step - 1's second dK^T slab retired: its Q stage and statistics are free
    warpgroup_fence_operand(acc_dkt);
    if (step > 0) ClusterBarrier::arrive(&s.stage_empty[(step + kStages - 1) % kStages]);
    ClusterBarrier::wait(&s.do_full, step_parity);
    Tensor tdPrdP = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tdPrdO(_, _, _, 0), tdPrV, tdPrdP);
    ClusterBarrier::wait(&s.stats_full[stage], stage_parity);
    const float* stage_lse2 = s.lse_log2[stage];
    const float* stage_dsum = s.dsum[stage];
    // Keys outside a query row's window need masking unless every row of the tile sees every
    // key of the tile (rows past Sq have lse = +inf, so their P is 0 anyway).
    const int last_row = (m0 + kBlockM < geo.len_q ? m0 + kBlockM : geo.len_q) - 1;
    const bool interior = mask.col_begin(last_row) <= n0 && mask.col_end(m0) >= n0 + kBlockN;

    warpgroup_wait<1>();  // S landed; dP may still be in flight
    warpgroup_fence_operand(tSrS);
    Tensor scores = make_tensor(tSrS.data(), accumulator_rowcol(tSrS.layout()));
    if (interior) {
      probabilities<false, false>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    } else {
      probabilities<true, false>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    }
    publish(tSrS, p_smem, buf, BwdWideBarrier::kPWritten);
    wgmma_gemm<false, -1>(mma_dkv, tdVrdOt(_, _, _, 0), tdVrP(_, _, _, buf), acc_dvt);

    warpgroup_wait<1>();  // dP landed; dV^T may still be in flight
    warpgroup_fence_operand(tdPrdP);
    Tensor dp = make_tensor(tdPrdP.data(), accumulator_rowcol(tdPrdP.layout()));
    dscores<false>(dp, scores, coords, stage_dsum);
    publish(tdPrdP, ds_smem, buf, BwdWideBarrier::kDsWritten);

    // dQ slice 0, dK^T's first slab, dQ slice 1, dK^T's second slab: each slice's additions go out
    // while the slab issued behind it runs.
    Tensor tdKrQt_stage = tdKrQt(_, _, _, stage);
    Tensor tdKrdS_buf = tdKrdS(_, _, _, buf);
    Tensor acc_dq0 = partition_fragment_C(mma_dq, typename Traits::TileShapedQSlice{});
    wgmma_gemm<true, -1>(mma_dq, tdQrdS(_, _, _, buf), tdQrKt0, acc_dq0);
    Tensor acc_dkt0 = row_slab(acc_dkt, 0);
    wgmma_gemm<false, -1>(mma_dkv, row_slab(tdKrQt_stage, 0), tdKrdS_buf, acc_dkt0);
    warpgroup_wait<1>();  // dV^T and dQ slice 0 retired; the first slab may be in flight
    warpgroup_fence_operand(acc_dvt);
    warpgroup_fence_operand(acc_dq0);
    ClusterBarrier::arrive(&s.do_empty);  // this thread is done with dO
    if constexpr (kDeterministic) {
      if (mma_tid == 0) take_dq_turn(step, pos, m0);
      NamedBarrier::sync(kMmaThreads, static_cast<uint32_t>(BwdWideBarrier::kDqTurn));
    }
    add_dq_slice(acc_dq0, 0, pos.head, m0);
    Tensor acc_dq1 = partition_fragment_C(mma_dq, typename Traits::TileShapedQSlice{});
    wgmma_gemm<true, -1>(mma_dq, tdQrdS(_, _, _, buf), tdQrKt1, acc_dq1);
    Tensor acc_dkt1 = row_slab(acc_dkt, 1);
    wgmma_gemm<false, -1>(mma_dkv, row_slab(tdKrQt_stage, 1), tdKrdS_buf, acc_dkt1);
    warpgroup_wait<1>();  // the first slab and dQ slice 1 retired; the second slab may be in flight
    warpgroup_fence_operand(acc_dq1);
    add_dq_slice(acc_dq1, 1, pos.head, m0);
    if constexpr (kDeterministic) ClusterBarrier::arrive(&s.dq_issued[step % 2]);
    pos = walk.next(pos);
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_dkt);
  if (num_steps > 0) ClusterBarrier::arrive(&s.stage_empty[(num_steps - 1) % kStages]);

  // ---- dK (times scale) and dV, staged through K's and V's buffers.
  store_dkv_t<Traits>(p, geo, thr_dkv, acc_dkt, acc_dvt, b, hk, n0, s, mma_tid,
                      static_cast<uint32_t>(BwdWideBarrier::kEpilogue));
#endif
}

}  // namespace flashtrain::cuda::sm90
