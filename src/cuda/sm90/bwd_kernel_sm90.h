// Backward stage 2 on Hopper: the main kernel on wgmma and TMA, between the sm80 preprocess
// (lse * log2e, D = rowsum(dO * O), dQ accumulator zeroed) and the sm80 postprocess (fp32 dQ
// rounded into dq), over the same workspace (src/cuda/sm80/bwd_plan.h).
//
// Grid: bwd_block_coords (bwd_params_sm90.h). Three warpgroups per block: the producer
// (bwd_producer_sm90.h: TMA loads of K, V, Q and dO, the row statistics, and dQ's TMA reductions)
// and two consumers. Per step (one kBlockM-row Q tile of one query head), consumer w with keys
// [64 w, 64 w + 64):
//   S^T  = K Q^T                                           (wgmma, shared x shared; in flight while
//                                                          dQ(t - 2) is staged, below)
//   dP^T = V dO^T                                          (wgmma, in flight during the softmax)
//   P^T  = exp2(S^T * scale log2e - lse log2e)             (0 outside the mask and for rows past Sq)
//   dV  += P^T dO                                          (wgmma, P^T from registers)
//   dS^T = P^T * (dP^T - D)  -> registers and shared memory (bf16 inputs: fp16, row-scaled,
//                                                          bwd_ds_scale_sm90.h)
//   dK  += dS^T Q                                          (wgmma, dS^T from registers)
//   dQ(t - 1) = dS K of the step before (kDeterministic: dQ(t); columns split over the consumers;
//          bf16 inputs: the fp16 copy of K), once both consumers' dS of that step is in shared
//          memory, times scale (bf16: and the inverse scales of dS and K); staged in shared memory
//          at the top of the next step (after the loop for the last), behind its S^T, for the
//          producer's dQ warp, which adds it into dq_accum by TMA reductions (in the fixed turns
//          of tile_range.h's deterministic schedule when kDeterministic, at D = 128 on two warps
//          taking alternate steps; the walk over Q tiles starts on the diagonal under its rotated
//          form)
// kDeterministic is a template parameter so that the default kernel carries none of the turn
// bookkeeping (with it as a runtime flag the default backward ran 3-4% slower). Staging dQ behind
// the next S^T, rather than before it, is measured in bench/results/2026-12-03_run14 (issuing
// dP^T there too was up to 7% slower); the producer warpgroup in run 15. Adding dQ straight from
// the consumers' registers by 8-byte vector atomics instead, which spares the staging's shared-
// memory traffic, made the backward 14-29% slower at D 64 and 128 (H100, run 25): the consumers
// then issue the reductions themselves, where the staging hands them to the dQ warp's TMA.
// dQ(t) waits a step for the other consumer's dS(t), so the consumers meet only through the dS
// buffers' mbarriers and one may run up to a step ahead of the other: while one computes its
// softmax, the other's GEMMs can keep the tensor cores busy (bf16 D 128 S 8k: backward time 0.92x
// that with dQ(t) in step t behind a barrier of both; bench/results/2026-12-04_run17). The
// deterministic kernel keeps dQ(t) in step t. The producer runs up to two stages ahead. Leaving
// dK(t) in flight into step t + 1 (dQ(t - 1) issued first, stage t released after the next S^T
// issue; free of ptxas's C751x notes only with a wait before the tail) made the fp16 D 128 default
// backward 5-9% slower and bf16 0.99-1.02x (H100, bench/results/2026-12-06_run29; why fp16 is
// not yet measured). dK (times scale) and dV are written once at the end.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "../../common/mask.h"
#include "../common/mask_tile.h"
#include "../sm80/bwd_params.h"
#include "bwd_ds_scale_sm90.h"
#include "bwd_epilogue_sm90.h"
#include "bwd_kernel_traits_sm90.h"
#include "bwd_params_sm90.h"
#include "bwd_producer_sm90.h"
#include "bwd_smem_stores_sm90.h"
#include "bwd_softmax_sm90.h"
#include "bwd_trace_sm90.h"
#include "device_code_sm90.h"
#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

template <class Traits, bool kDeterministic>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    bwd_kernel_sm90(const __grid_constant__ BwdKernelParams<Traits> kp) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using Element = typename Traits::Element;
  using ElementdQ = typename Traits::ElementdQ;
  using SharedStorage = typename Traits::SharedStorage;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  constexpr bool kStatsCopyK = stats_copy_k<Traits, kDeterministic>();  // bwd_ds_scale_sm90.h
  // The producer's warps: 0 loads, 1 adds dQ, 2 and 3 fetch the row statistics; deterministic at
  // D = 128, warp 3 adds every other step's dQ instead (bwd_write_dq), and warp 2 fetches alone.
  // (At D = 64, whose consumer step is about as long as the dQ thread's chain, two dQ threads made
  // the deterministic backward 0-4% slower: bench/results/2026-12-07_run58.)
  constexpr int kDqThreads = kDeterministic && kHeadDim == 128 ? 2 : 1;
  constexpr int kStatsThreads = kDqThreads == 2 ? 32 : Traits::kStatsThreads;
  static_assert(!(kDqThreads == 2 && kStatsCopyK),
                "K's fp16 copy by the statistics warps needs both of them");
  using TileSdP = Shape<Int<kBlockN>, Int<kBlockM>>;
  static_assert(kStages == 2, "a stage is refilled for the step two ahead (next_pos twice)");
  static_assert(Traits::kStagesdS == 2, "dS buffers alternate by step parity");

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
  BwdWalk walk = make_bwd_walk<kBlockM, kBlockN>(p, mask, geo.len_q, n_block, n0, hq_begin);
  const int num_steps = walk.num_steps;

  const int warp = tid / 32;
  if (warp == 0 && cute::elect_one_sync()) {
    init_load_barriers<Traits, kStatsThreads>(kp, s);
    cute::prefetch_tma_descriptor(kp.tma_dq.get_tma_descriptor());
    ClusterBarrier::init(&s.dq_full, Traits::kNumMmaThreads);
    ClusterBarrier::init(&s.dq_empty, 1);
    ClusterBarrier::init(&s.vmax_ready, 1);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Traits::kStagesdS; ++i) {
      ClusterBarrier::init(&s.ds_full[i], Traits::kNumMmaThreads);
      ClusterBarrier::init(&s.ds_empty[i], Traits::kNumMmaThreads);
    }
    ClusterBarrier::init(&s.stagger, 1);
    if constexpr (kStatsCopyK) ClusterBarrier::init(&s.kdq_ready, Traits::kStatsThreads);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (tid < Traits::kThreadsPerWarpGroup) {  // ---- the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp == 0) {
      if (num_steps > 0 && cute::elect_one_sync()) bwd_load_tiles<Traits>(kp, s, walk, b, hk, n_block);
    } else if (warp == 1 || (kDqThreads == 2 && warp == 3)) {
      if (tid % 32 == 0)
        bwd_write_dq<Traits, kDeterministic, kDqThreads>(kp, s, walk, mask, geo, b, n_block,
                                                         warp == 1 ? 0 : 1);
    } else {
      bwd_fetch_stats<Traits, kStatsCopyK, kStatsThreads>(p, geo, s, walk, tid - Traits::kStatsWarp * 32);
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int mma_tid = tid - Traits::kThreadsPerWarpGroup;
  if constexpr (kBwdTrace) {  // bwd_trace_sm90.h: nothing unless built with FLASHTRAIN_BWD_TRACE
    bwd_trace_phase(kp.trace, mma_tid, kPhaseStart);
    if (mma_tid == 0) {
      bwd_trace(kp.trace, mma_tid, kTraceGlobalStart, trace_globaltimer());
      uint32_t sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      bwd_trace(kp.trace, mma_tid, kTraceSm, sm);
      bwd_trace(kp.trace, mma_tid, kTraceSteps, static_cast<uint64_t>(num_steps));
    }
  }

  // ---- shared memory ----------------------------------------------------------------------
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKV{});
  ElementdQ* k_dq;  // the B operand of dQ = dS K
  if constexpr (Traits::kScaledDs) {
    k_dq = s.k_dq.data();
  } else {
    k_dq = s.k.data();
  }
  Tensor sKt = make_tensor(make_smem_ptr(k_dq), typename Traits::SmemLayoutKt{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdO{});
  Tensor sQt = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdOt{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutQdO{});
  Tensor sdOt = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutQdOt{});
  Tensor sdS = make_tensor(make_smem_ptr(s.ds.data()), typename Traits::SmemLayoutdS{});

  if (num_steps > 0) {
    ClusterBarrier::wait(&s.kv_full, 0);
    bwd_trace_phase(kp.trace, mma_tid, kPhaseKv);
    if constexpr (Traits::kScaledDs && !kStatsCopyK) {
      // bf16: the fp16 copy of K for dQ, and for the statistics warps the tile's max |V| (for s_i)
      // and the part of dQ's row factors common to all rows.
      float v_max = 0.0f;
      int k_exp = 0;
      constexpr int kThreads = Traits::kNumMmaThreads;
      tile_abs_maxima<Traits, kThreads, BwdBarrier::kPrologue>(s.k.data(), s.v.data(), s.scratch, mma_tid, v_max, k_exp);
      convert_k_for_dq<Traits, kThreads>(s.k.data(), s.k_dq.data(), k_exp, mma_tid);
      if (mma_tid == 0) {
        s.v_max = v_max;
        s.dq_scale = p.scale * exact_pow2(-k_exp);  // a row's dQ factor, but for 1 / s_i
        ClusterBarrier::arrive(&s.vmax_ready);
      }
    }
  }

  // ---- MMA partitions ----------------------------------------------------------------------
  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_tid);
  auto thr_dkv = mma_dkv.get_thread_slice(mma_tid);
  auto thr_dq = mma_dq.get_thread_slice(mma_tid);

  Tensor tSrK = thr_sdp.partition_fragment_A(sK);     // descriptors, this warpgroup's 64 keys
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);     // (MMA, MMA_N, MMA_K, stages)
  Tensor tdPrV = thr_sdp.partition_fragment_A(sV);
  Tensor tdPrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);   // (MMA, MMA_M, MMA_K, dS buffers)
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKt);
  // The A operand of the dropped dQ GEMM of step 0: the bytes of K and V (adjacent in
  // SharedStorage), which nothing writes during the loop.
  static_assert(sizeof(ElementdQ) * kBlockM * kBlockN <= sizeof(s.k) + sizeof(s.v), "one dS buffer within K and V");
  Tensor tdQrNone = thr_dq.partition_fragment_A(
      make_tensor(make_smem_ptr(reinterpret_cast<ElementdQ*>(s.k.data())), typename Traits::SmemLayoutdS{}));

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);

  // Shared-memory addresses of the dS buffers and the dQ staging tile (bwd_smem_stores_sm90.h).
  const uint32_t ds_smem = cute::cast_smem_ptr_to_uint(s.ds.data());
  const uint32_t dq_smem = cute::cast_smem_ptr_to_uint(s.dq.data());

  // (key, query) coordinates of this thread's S^T elements inside the tile.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileSdP{}));
  Tensor coords = make_tensor(tScS.data(), accumulator_rowcol(tScS.layout()));

  // Step t's dQ (scale * dS K, computed at its end) is staged at the top of step t + 1, behind the
  // issue of that step's S^T, so that the tensor cores have S^T while the staging runs; the
  // producer's dQ warp takes it from there. (The scaled dQ is a register array of its own, not the
  // accumulator: were the two one set of registers across the loop, ptxas would wait for the S^T
  // batch before the staging's stores.)
  Tensor dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  // The staged dQ is handed to the dQ warp right after its stores (D = 128) or, in the loop, only
  // once S^T has landed (D = 64), so that the fence finds the stores complete instead of waiting for
  // them. H200, run 19 call 1: the later hand-over made the D = 64 backward 2-7% faster and the
  // D = 128 one 3-8% slower (whose longer S^T GEMM delays the reduction by as much).
  constexpr bool kLatePublish = kHeadDim == 64;
  auto publish_dq = [&]() {
    cutlass::arch::fence_view_async_shared();  // dQ stores visible to the TMA reduction
    ClusterBarrier::arrive(&s.dq_full);
  };
  // `publish`: hand the tile over right away (false: the loop's late hand-over does).
  auto stage_dq = [&](int step, bool publish) {
    // The dQ warp's reductions of the step before have read the staging tile.
    if (step > 0) ClusterBarrier::wait(&s.dq_empty, static_cast<uint32_t>((step - 1) & 1));
    store_dq_staging<Traits>(dq_smem, dq, mma_tid);
    if (publish) publish_dq();
  };

  // kLag (the default backward): step t's dQ GEMM is dQ(t - 1), on dS buffer (t - 1) % 2, which both
  // consumers wrote in step t - 1. The consumers meet only there: ds_full says a buffer's dS is
  // written (each consumer waits for it a step after its own writes, so that one may run up to a
  // step ahead of the other), ds_empty that both dQ GEMMs reading it have retired (before dS(t + 2)
  // overwrites it). kDeterministic: dQ(t) in step t, after a barrier of both consumers, as its turn
  // in the fixed order of the additions comes a step sooner (with the lag, deterministic backwards
  // at S = 2k ran 13-16% slower, run 17).
  constexpr bool kLag = !kDeterministic;
  constexpr int kStageDelay = kLag ? 2 : 1;  // dQ(t) is staged at the top of step t + kStageDelay
  // dQ(t) once both consumers' dS(t) is in shared memory. Step 0 (drop) runs the GEMM too, on
  // read-only bytes, and its result is dropped: with the GEMM behind a branch ptxas serialised
  // every wgmma of the loop (C7515).
  auto issue_dq = [&](int t, bool drop, auto& acc_dq) {
    if (kStatsCopyK && t == 0 && !drop) ClusterBarrier::wait(&s.kdq_ready, 0);  // K's fp16 copy
    if (!drop) ClusterBarrier::wait(&s.ds_full[t % 2], static_cast<uint32_t>((t / 2) & 1));
    wgmma_gemm<true, -1>(mma_dq, drop ? tdQrNone(_, _, _, 0) : tdQrdS(_, _, _, t % 2), tdQrKt, acc_dq);
  };
  // Retires every wgmma of this warpgroup in flight.
  auto retire_all = [&](auto& acc_dq) {
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_dq);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(acc_dv);
  };
  // dQ(t)'s row factors: scale for fp16; for bf16 also 2^-eK / s_i (bwd_ds_scale_sm90.h), from
  // their slot (step t's stage is released by then).
  auto row_factors = [&](int t) {
    cute::array<float, 2 * kBlockM / 64> f;
    if constexpr (Traits::kScaledDs) {
      f = dq_row_factors<Traits>(s.dq_factor[t % 3], mma_tid);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < static_cast<int>(f.size()); ++i) f[i] = p.scale;
    }
    return f;
  };
  // The second consumer starts half a step behind the first (once the first has issued its first dV
  // GEMM), so that their softmaxes fall on each other's GEMMs rather than together.
  if (kLag && num_steps > 0 && mma_tid >= Traits::kThreadsPerWarpGroup) ClusterBarrier::wait(&s.stagger, 0);
  bwd_trace_phase(kp.trace, mma_tid, kPhaseLoop);

  // kDqInFlight (bf16 inputs, D = 128): dQ(t - 1), issued last in step t, stays in flight over the
  // step boundary and retires at the top of step t + 1, after its Q / dO wait and before its S^T
  // issue; its row factors are read at the end of step t, before stage t (whose factor slot the
  // producer refills) is released. Run 30 call 1 (H100): bf16 D = 128 default backward 2-4%
  // faster; fp16 0-2% slower (more MIO throttle), so fp16 retires dQ(t - 1) within step t.
  constexpr bool kDqInFlight = kLag && Traits::kScaledDs && kHeadDim == 128;
  Tensor acc_dq_lag = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  decltype(row_factors(0)) dq_factors{};  // step 0's dropped dQ: no statistics read yet
  auto take_lagged_dq = [&](int step) {  // dQ(step - 2): retired, its dS buffer released, scaled
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_dq_lag);
    if (step > 1) ClusterBarrier::arrive(&s.ds_empty[step % 2]);
    scale_dq_rows<Traits>(dq, acc_dq_lag, dq_factors);
  };
  DqWalkPos pos = walk.first;
  CUTLASS_PRAGMA_NO_UNROLL
  for (int step = 0; step < num_steps; ++step) {
    const int stage = step % kStages;
    const int ds_stage = step % Traits::kStagesdS;
    const int m0 = pos.m_block * kBlockM;
    const uint32_t stage_parity = static_cast<uint32_t>((step / kStages) & 1);

    ClusterBarrier::wait(&s.qdo_full[stage], stage_parity);
    if constexpr (kDqInFlight) take_lagged_dq(step);
    Tensor tSrS = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS);
    if (step >= kStageDelay) stage_dq(step - kStageDelay, !kLatePublish);
    Tensor tdPrdP = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tdPrV, tdPrdO(_, _, _, stage), tdPrdP);
    ClusterBarrier::wait(&s.stats_full[stage], stage_parity);
    const float* stage_lse2 = s.lse_log2[stage];
    const float* stage_dsum = s.dsum[stage];
    // Keys outside a query row's window need masking unless every row of the tile sees every
    // key of the tile (rows past Sq have lse = +inf, so their P is 0 anyway).
    const int last_row = (m0 + kBlockM < geo.len_q ? m0 + kBlockM : geo.len_q) - 1;
    const bool interior = mask.col_begin(last_row) <= n0 && mask.col_end(m0) >= n0 + kBlockN;

    warpgroup_wait<1>();  // S^T landed; dP^T may still be in flight
    warpgroup_fence_operand(tSrS);
    if (kLatePublish && step >= kStageDelay) publish_dq();
    Tensor scores = make_tensor(tSrS.data(), accumulator_rowcol(tSrS.layout()));
    if (interior) {
      probabilities<false, true>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    } else {
      probabilities<true, true>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    }
    Tensor tOrP = make_tensor<Element>(accumulator_as_a_operand(tSrS.layout()));
    convert_fragment(tSrS, tOrP);
    wgmma_gemm<false, -1>(mma_dkv, tOrP, tdVrdOt(_, _, _, stage), acc_dv);
    if (kLag && step == 0 && mma_tid == 0) ClusterBarrier::arrive(&s.stagger);

    warpgroup_wait<1>();  // dP^T landed; dV may still be in flight
    warpgroup_fence_operand(tdPrdP);
    Tensor dp = make_tensor(tdPrdP.data(), accumulator_rowcol(tdPrdP.layout()));
    dscores<true>(dp, scores, coords, stage_dsum);
    Tensor tOrdS = make_tensor<Element>(accumulator_as_a_operand(tdPrdP.layout()));
    convert_fragment(tdPrdP, tOrdS);
    // dS^T into this step's dS buffer once dQ(step - 2) has read it (kDeterministic: retired before
    // the last dS barrier). bf16: fp16(dS^T s_i) (before the dK GEMM, whose operand registers would
    // otherwise be live next to the fp32 dS^T).
    if (kLag && step > 1) ClusterBarrier::wait(&s.ds_empty[ds_stage], static_cast<uint32_t>((step / 2 - 1) & 1));
    if constexpr (Traits::kScaledDs) {
      store_ds_transposed_scaled<Traits>(ds_smem, tdPrdP, s.ds_scale[stage], ds_stage, mma_tid);
    } else {
      store_ds_transposed<Traits>(ds_smem, tOrdS, ds_stage, mma_tid);
    }
    wgmma_gemm<false, -1>(mma_dkv, tOrdS, tdKrQt(_, _, _, stage), acc_dk);
    cutlass::arch::fence_view_async_shared();  // dS stores visible to the wgmma (async proxy)
    if constexpr (kDqInFlight) {
      ClusterBarrier::arrive(&s.ds_full[ds_stage]);
      issue_dq(step - 1, step == 0, acc_dq_lag);  // dQ(step - 1), retired in the next step
      warpgroup_wait<1>();                         // dV and dK retired
      warpgroup_fence_operand(acc_dk);
      warpgroup_fence_operand(acc_dv);
      dq_factors = row_factors(step + 2);  // dQ(step - 1)'s, + 3 for step 0's dropped one
    } else {
      Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
      if constexpr (kLag) {
        ClusterBarrier::arrive(&s.ds_full[ds_stage]);
        issue_dq(step - 1, step == 0, acc_dq);  // dQ(step - 1)
        retire_all(acc_dq);
        if (step > 0) ClusterBarrier::arrive(&s.ds_empty[(step + 1) % 2]);
      } else {
        cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, static_cast<uint32_t>(BwdBarrier::kDsWritten));
        wgmma_gemm<true, -1>(mma_dq, tdQrdS(_, _, _, ds_stage), tdQrKt, acc_dq);
        retire_all(acc_dq);
      }
      // Unconditional (with the lag, step 0's result is never staged), so that dq is dead between
      // its staging and here, as far as ptxas can tell. The factors are those of the step whose dQ
      // this is, step + 1 - kStageDelay, plus 3 so that step 0's dropped one reads a valid slot.
      scale_dq_rows<Traits>(dq, acc_dq, row_factors(step + 4 - kStageDelay));
    }
    // This thread is done with the stage: every wgmma of its warpgroup that reads Q or dO has
    // completed (the wait above covers the whole warpgroup's batches), and so have its reads of the
    // statistics (their values are used above).
    ClusterBarrier::arrive(&s.stage_empty[stage]);
    pos = walk.next(pos);
  }
  if constexpr (kDqInFlight) take_lagged_dq(num_steps);  // before the tail's branches (C7518 otherwise)
  bwd_trace_phase(kp.trace, mma_tid, kPhaseLoopEnd);
  if (kLag && num_steps > 1) stage_dq(num_steps - 2, true);
  if (kLag && num_steps > 0) {
    issue_dq(num_steps - 1, false, acc_dq_lag);
    retire_all(acc_dq_lag);
    scale_dq_rows<Traits>(dq, acc_dq_lag, row_factors(num_steps - 1));
  }
  if (num_steps > 0) stage_dq(num_steps - 1, true);
  bwd_trace_phase(kp.trace, mma_tid, kPhaseTail);

  // ---- dK and dV, staged in V's shared memory. Each warpgroup's last dP GEMM, the last reader of
  // its V rows, has retired; in a one-step tile the other warpgroup's dropped dQ GEMM may still read
  // V's bytes (tdQrNone), which later steps' dS waits rule out otherwise.
  if (kLag && num_steps == 1)
    cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, static_cast<uint32_t>(BwdBarrier::kTileDone));
  store_dkv<Traits>(p, geo, thr_dkv, acc_dk, acc_dv, b, hk, n0, geo.len_k - n0, s.v.data(), mma_tid);
  bwd_trace_phase(kp.trace, mma_tid, kPhaseEnd);
  if (kBwdTrace && mma_tid == 0) bwd_trace(kp.trace, mma_tid, kTraceGlobalEnd, trace_globaltimer());
#endif
}

}  // namespace flashtrain::cuda::sm90
