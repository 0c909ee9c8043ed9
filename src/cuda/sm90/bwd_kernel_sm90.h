// Backward stage 2 on Hopper: the main kernel on wgmma and TMA, between the sm80 preprocess
// (lse * log2e, D = rowsum(dO * O), dQ accumulator zeroed) and the sm80 postprocess (fp32 dQ
// rounded into dq), over the same workspace (src/cuda/sm80/bwd_plan.h).
//
// Grid: bwd_block_coords below; two warpgroups per block (bwd_kernel_traits_sm90.h).
// Per step (one kBlockM-row Q tile of one query head), warpgroup w with keys [64 w, 64 w + 64):
//   S^T  = K Q^T                                           (wgmma, shared x shared; in flight while
//                                                          the previous step's dQ is staged, below)
//   dP^T = V dO^T                                          (wgmma, in flight during the softmax)
//   P^T  = exp2(S^T * scale log2e - lse log2e)             (0 outside the mask and for rows past Sq)
//   dV  += P^T dO                                          (wgmma, P^T from registers)
//   dS^T = P^T * (dP^T - D)  -> registers and shared memory (bf16 inputs: fp16, row-scaled,
//                                                          bwd_ds_scale_sm90.h)
//   dK  += dS^T Q                                          (wgmma, dS^T from registers)
//   -- block barrier: both warpgroups' dS written --
//   dQ   = dS K (columns split over the warpgroups; bf16 inputs: the fp16 copy of K), times scale
//          (bf16: and the inverse scales of dS and K); at the top of the next step (after the
//          loop for the last), staged in shared memory, and each warpgroup adds its columns into
//          dq_accum by TMA reduction (in the fixed turns of
//          tile_range.h's deterministic schedule when kDeterministic, a turn passing on at the
//          next step's dS barrier once both warpgroups' additions are complete; the walk over Q
//          tiles starts on the diagonal under its rotated form)
// kDeterministic is a template parameter so that the default kernel carries none of the turn
// bookkeeping (with it as a runtime flag the default backward ran 3-4% slower). Staging step t's
// dQ behind step t + 1's S^T, rather than before it, is measured in bench/results/2026-12-03_run14
// (issuing dP^T there too was up to 7% slower).
// The dS barrier is the only one between the warpgroups in a step, so one may run up to a step
// ahead of the other. Q / dO come by TMA two steps ahead: the warpgroup that is second to finish
// with a stage refills it. dK (times scale) and dV are written once at the end.
#pragma once
#include <cmath>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "../../common/mask.h"
#include "../common/fast_math.h"
#include "../common/mask_tile.h"
#include "../sm80/bwd_epilogue.h"
#include "../sm80/bwd_params.h"
#include "../sm80/bwd_row_stats.h"
#include "bwd_ds_scale_sm90.h"
#include "bwd_kernel_traits_sm90.h"
#include "bwd_smem_stores_sm90.h"
#include "device_code_sm90.h"
#include "wgmma_utils_sm90.h"


namespace flashtrain::cuda::sm90 {

template <class Traits>
struct BwdKernelParams {
  sm80::BwdParams p;
  typename Traits::TmaLoadQdO tma_q;
  typename Traits::TmaLoadQdO tma_do;
  typename Traits::TmaLoadKV tma_k;
  typename Traits::TmaLoadKV tma_v;
  typename Traits::TmaReducedQ tma_dq;
  typename Traits::ShapeQKV shape_q;
  typename Traits::ShapeQKV shape_k;
  typename Traits::ShapeQKV shape_dq;
  // Grid order (bwd_launch_template_sm90.h). band_heads == 0: a 3-D grid (key tile, batch, head),
  // the key tiles of a head adjacent (descending under the rotated dQ walk: dq_launch_key_tile). band_heads > 0: a 1-D grid walking bands of band_heads
  // (batch, head) units, each band key tile by key tile: every unit's tile 0 of the band, then
  // every tile 1, ...
  int band_heads;
  int units;     // batch * heads per block row (the grid's y * z extent in the 3-D order)
  int n_blocks;  // key tiles per unit
};

// (key tile, batch, head unit) of this block under kp's grid order.
template <class Traits>
__device__ __forceinline__ void bwd_block_coords(const BwdKernelParams<Traits>& kp, int heads_z, int& n_block, int& b,
                                                 int& head_z) {
  if (kp.band_heads == 0) {
    n_block = dq_launch_key_tile(kp.p.dq_rotated, kp.n_blocks, static_cast<int>(blockIdx.x));
    b = static_cast<int>(blockIdx.y);
    head_z = static_cast<int>(blockIdx.z);
    return;
  }
  const int lin = static_cast<int>(blockIdx.x);
  const int per_band = kp.band_heads * kp.n_blocks;
  const int band = lin / per_band;
  const int r = lin - band * per_band;
  const int first_unit = band * kp.band_heads;
  const int units_here = min(kp.band_heads, kp.units - first_unit);
  n_block = r / units_here;
  const int unit = first_unit + (r - n_block * units_here);
  b = unit / heads_z;
  head_z = unit - b * heads_z;
}

// Waits until this thread's bulk groups (the TMA reductions) have completed, and orders their
// (async-proxy) global writes before this thread's later generic-proxy operations (the
// deterministic turn's release).
__device__ __forceinline__ void bulk_wait_complete() {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
// Passes the deterministic dQ turn of semaphore `sema` on, from one thread, once both warpgroups'
// additions are complete (sm80/bwd_epilogue.h's turn primitives).
__device__ __forceinline__ void pass_turn(int* sema) {
  __threadfence();
  sm80::release_dq_turn(sema);
}

template <class Traits, bool kDeterministic>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    bwd_kernel_sm90(const __grid_constant__ BwdKernelParams<Traits> kp) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::ClusterTransactionBarrier;
  using Element = typename Traits::Element;
  using ElementdQ = typename Traits::ElementdQ;
  using SharedStorage = typename Traits::SharedStorage;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  using TileSdP = Shape<Int<kBlockN>, Int<kBlockM>>;
  static_assert(kStages == 2, "a stage is refilled for the step two ahead (next_pos twice)");

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
  // The column range is the whole tile (not clipped at len_k) so that first_key_tile() inverts it.
  const TileRange m_tiles = visible_query_tiles(mask, n0, n0 + kBlockN, geo.len_q, kBlockM);
  const int m_count = m_tiles.empty() ? 0 : m_tiles.end - m_tiles.begin;
  const int num_steps = m_count * p.heads_per_chunk;

  // ---- shared memory and TMA --------------------------------------------------------------
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

  const int wg = tid / Traits::kThreadsPerWarpGroup;
  const int wg_tid = tid % Traits::kThreadsPerWarpGroup;
  if (tid == 0) {
    cute::prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_dq.get_tma_descriptor());
    ClusterBarrier::init(&s.kv_full, 1);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kStages; ++i) {
      ClusterBarrier::init(&s.qdo_full[i], 1);
      s.qdo_released[i] = 0;
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // Step t covers query head hq_begin + t / m_count and step t % m_count of the walk over the Q
  // tiles, which starts on the diagonal under the rotated deterministic schedule (tile_range.h).
  // The loop follows the steps one by one (dq_walk_next), dividing by m_count nowhere.
  const int walk_start = m_tiles.begin + dq_walk_offset(p.dq_rotated, n_block, m_tiles, kBlockM, kBlockN);
  auto next_pos = [&](DqWalkPos pos) { return dq_walk_next(m_tiles, walk_start, pos); };

  // One thread: Q and dO of the step at `pos` into `stage` (TMA zero-fills rows past Sq).
  auto load_qdo = [&](DqWalkPos pos, int stage) {
    Tensor mQ = kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor mdO = kp.tma_do.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    Tensor gdO = local_tile(mdO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    auto cta_q = kp.tma_q.get_slice(_0{});
    auto cta_do = kp.tma_do.get_slice(_0{});
    ClusterTransactionBarrier::arrive_and_expect_tx(&s.qdo_full[stage], 2 * Traits::kTmaBytesQ);
    copy(kp.tma_q.with(s.qdo_full[stage]), cta_q.partition_S(gQ), cta_q.partition_D(sQ(_, _, stage)));
    copy(kp.tma_do.with(s.qdo_full[stage]), cta_do.partition_S(gdO), cta_do.partition_D(sdO(_, _, stage)));
  };
  // Row statistics of `step` (at `pos`) into `stage` (bwd_row_stats.h; bf16: and f_i into the
  // step's scale slot), made visible by the dS barrier of the step issuing them (each thread waits
  // for its own copies before it, and then turns its rows' f_i into s_i: finish_stats).
  static_assert(2 * kBlockM <= Traits::kNumThreads, "one thread per row statistic");
  auto load_stats = [&](int step, DqWalkPos pos, int stage) {
    fetch_step_stats<Traits>(p, geo, pos.head, pos.m_block * kBlockM, tid, s.lse_log2[stage], s.dsum[stage],
                             s.ds_scale[step % Traits::kScaleSlots]);
    cute::cp_async_fence();
  };
  // bf16: s.v_max, the tile's max |V|, is set in the prologue (bwd_ds_scale_sm90.h). It and
  // s.dq_scale live in shared memory, not in registers the main loop would lack.
  auto finish_stats = [&](int step, int stage) {
    if constexpr (Traits::kScaledDs)
      finish_row_scale<Traits>(tid, s.dsum[stage], s.ds_scale[step % Traits::kScaleSlots], s.v_max);
  };

  const DqWalkPos first_pos{hq_begin, walk_start};
  if (num_steps > 0) {
    if (tid == 0) {
      Tensor mK = kp.tma_k.get_tma_tensor(kp.shape_k)(_, _, hk, b);
      Tensor mV = kp.tma_v.get_tma_tensor(kp.shape_k)(_, _, hk, b);
      Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(n_block, _0{}));
      Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(n_block, _0{}));
      auto cta_k = kp.tma_k.get_slice(_0{});
      auto cta_v = kp.tma_v.get_slice(_0{});
      ClusterTransactionBarrier::arrive_and_expect_tx(&s.kv_full, 2 * Traits::kTmaBytesKV);
      copy(kp.tma_k.with(s.kv_full), cta_k.partition_S(gK), cta_k.partition_D(sK));
      copy(kp.tma_v.with(s.kv_full), cta_v.partition_S(gV), cta_v.partition_D(sV));
      load_qdo(first_pos, 0);
      if (num_steps > 1) load_qdo(next_pos(first_pos), 1);
    }
    load_stats(0, first_pos, 0);
    float v_max = 0.0f;
    int k_exp = 0;
    if constexpr (Traits::kScaledDs) {
      ClusterBarrier::wait(&s.kv_full, 0);
      convert_k_for_dq<Traits>(s.k.data(), s.v.data(), s.k_dq.data(), s.scratch, tid, v_max, k_exp);
    }
    if (Traits::kScaledDs && tid == 0) {
      s.v_max = v_max;
      s.dq_scale = p.scale * exact_pow2(-k_exp);  // a row's dQ factor, but for 1 / s_i
    }
    cute::cp_async_wait<0>();
    if constexpr (Traits::kScaledDs) finish_row_scale<Traits>(tid, s.dsum[0], s.ds_scale[0], v_max);
    __syncthreads();
  }

  // ---- MMA partitions ----------------------------------------------------------------------
  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);

  Tensor tSrK = thr_sdp.partition_fragment_A(sK);     // descriptors, this warpgroup's 64 keys
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);     // (MMA, MMA_N, MMA_K, stages)
  Tensor tdPrV = thr_sdp.partition_fragment_A(sV);
  Tensor tdPrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);   // (MMA, MMA_M, MMA_K, dS buffers)
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKt);

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);

  // Shared-memory addresses of the dS buffers and the dQ staging tile (bwd_smem_stores_sm90.h).
  const uint32_t ds_smem = cute::cast_smem_ptr_to_uint(s.ds.data());
  const uint32_t dq_smem = cute::cast_smem_ptr_to_uint(s.dq.data());
  // This warpgroup's TMA reductions of a step: its boxes of 32 columns, issued by one thread.
  auto reduce_dq = [&](int hq, int m_block) {
    Tensor mdQ = kp.tma_dq.get_tma_tensor(kp.shape_dq)(_, _, hq, b);
    auto cta = kp.tma_dq.get_slice(_0{});
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Traits::kDqBoxesPerWarpGroup; ++i) {
      const int box = wg * Traits::kDqBoxesPerWarpGroup + i;
      Tensor gdQ = local_tile(mdQ, Shape<Int<kBlockM>, Int<Traits::kDqBoxCols>>{}, make_coord(m_block, box));
      Tensor sdQbox = make_tensor(make_smem_ptr(s.dq.data() + box * kBlockM * Traits::kDqBoxCols),
                                  typename Traits::SmemLayoutdQBox{});
      copy(kp.tma_dq, cta.partition_S(sdQbox), cta.partition_D(gdQ));
    }
    cute::tma_store_arrive();
  };

  // (key, query) coordinates of this thread's S^T elements inside the tile.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileSdP{}));
  Tensor coords = make_tensor(tScS.data(), accumulator_rowcol(tScS.layout()));
  constexpr int kRows = decltype(size<0>(coords))::value;  // keys of this thread
  constexpr int kCols = decltype(size<1>(coords))::value;  // queries of this thread

  // Deterministic: the semaphore (index into p.dq_sema) of the dQ turn this block holds and has
  // not passed on yet, -1 when none.
  int pending_turn = -1;
  // Step t's dQ (scale * dS K, computed at its end) is staged and reduced at the top of step t + 1,
  // behind the issue of that step's S^T, so that the tensor cores have S^T while the staging runs.
  // (The scaled dQ is a register array of its own, not the accumulator: were the two one set of
  // registers across the loop, ptxas would wait for the S^T batch before the staging's stores.)
  Tensor dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  auto stage_and_reduce_dq = [&](DqWalkPos at) {
    store_dq_staging<Traits>(dq_smem, dq, tid);
    cutlass::arch::fence_view_async_shared();  // dQ stores visible to the TMA reduction
    // This warpgroup's columns staged (barrier wg: its threads alone).
    cutlass::arch::NamedBarrier::sync(Traits::kThreadsPerWarpGroup, static_cast<uint32_t>(wg));
    if constexpr (kDeterministic) {
      // Each warpgroup's issuing thread waits for the tile's turn itself (no block barrier); the
      // turn passes on at the next dS barrier, or after the loop, once both have completed.
      const int m0 = at.m_block * kBlockM;
      pending_turn = static_cast<int>(sm80::dq_semaphore(p, b, at.head, at.m_block) - p.dq_sema);
      if (wg_tid == 0)
        sm80::spin_until_dq_turn(p.dq_sema + pending_turn,
                                 dq_turn(mask, p.dq_rotated, n_block, m0, min(m0 + kBlockM, geo.len_q), kBlockN));
    }
    if (wg_tid == 0) reduce_dq(at.head, at.m_block);
  };

  if constexpr (!Traits::kScaledDs) {
    if (num_steps > 0) ClusterBarrier::wait(&s.kv_full, 0);
  }
  DqWalkPos pos = first_pos;
  DqWalkPos prev_pos = first_pos;
  CUTLASS_PRAGMA_NO_UNROLL
  for (int step = 0; step < num_steps; ++step) {
    const int stage = step % kStages;
    const int ds_stage = step % Traits::kStagesdS;
    const int m0 = pos.m_block * kBlockM;
    const DqWalkPos pos1 = next_pos(pos);
    const bool has_next = step + 1 < num_steps;

    ClusterBarrier::wait(&s.qdo_full[stage], static_cast<uint32_t>((step / kStages) & 1));
    Tensor tSrS = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS);
    if (step > 0) stage_and_reduce_dq(prev_pos);
    Tensor tdPrdP = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tdPrV, tdPrdO(_, _, _, stage), tdPrdP);
    // The other stage's statistics were last read before the previous step's dS barrier.
    if (has_next) load_stats(step + 1, pos1, stage ^ 1);
    // Row statistics of this thread's query columns, read from shared memory where they are used
    // (each serves kRows elements; holding them in registers would cost 2 * kCols).
    const float* stage_lse2 = s.lse_log2[stage];
    const float* stage_dsum = s.dsum[stage];
    // Keys outside a query row's window need masking unless every row of the tile sees every
    // key of the tile (rows past Sq have lse = +inf, so their P is 0 anyway).
    const int last_row = (m0 + kBlockM < geo.len_q ? m0 + kBlockM : geo.len_q) - 1;
    const bool interior = mask.col_begin(last_row) <= n0 && mask.col_end(m0) >= n0 + kBlockN;

    warpgroup_wait<1>();  // S^T landed; dP^T may still be in flight
    warpgroup_fence_operand(tSrS);
    Tensor scores = make_tensor(tSrS.data(), accumulator_rowcol(tSrS.layout()));
    const float scale_log2 = p.scale_log2;
    if (interior) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const float lse2 = stage_lse2[get<1>(coords(0, c))];
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kRows; ++r) scores(r, c) = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const float lse2 = stage_lse2[get<1>(coords(0, c))];
        const int i = m0 + get<1>(coords(0, c));
        const int begin = static_cast<int>(mask.col_begin(i)) - n0;
        const int end = (i < geo.len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kRows; ++r) {
          const int j = get<0>(coords(r, 0));
          const float prob = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
          scores(r, c) = (j >= begin && j < end) ? prob : 0.0f;
        }
      }
    }
    Tensor tOrP = make_tensor<Element>(accumulator_as_a_operand(tSrS.layout()));
    convert_fragment(tSrS, tOrP);
    wgmma_gemm<false, -1>(mma_dkv, tOrP, tdVrdOt(_, _, _, stage), acc_dv);

    warpgroup_wait<1>();  // dP^T landed; dV may still be in flight
    warpgroup_fence_operand(tdPrdP);
    Tensor dp = make_tensor(tdPrdP.data(), accumulator_rowcol(tdPrdP.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const float dsum = stage_dsum[get<1>(coords(0, c))];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) dp(r, c) = scores(r, c) * (dp(r, c) - dsum);
    }
    Tensor tOrdS = make_tensor<Element>(accumulator_as_a_operand(tdPrdP.layout()));
    convert_fragment(tdPrdP, tOrdS);
    // dS^T into this step's dS buffer, last read by the dQ GEMMs two steps back (retired before
    // the last dS barrier). bf16: fp16(dS^T s_i) (before the dK GEMM, whose operand registers
    // would otherwise be live next to the fp32 dS^T).
    if constexpr (Traits::kScaledDs) {
      store_ds_transposed_scaled<Traits>(ds_smem, tdPrdP, s.ds_scale[step % Traits::kScaleSlots], ds_stage, tid);
    } else {
      store_ds_transposed<Traits>(ds_smem, tOrdS, ds_stage, tid);
    }
    wgmma_gemm<false, -1>(mma_dkv, tOrdS, tdKrQt(_, _, _, stage), acc_dk);
    // The next step's row statistics have landed (this thread's copies); bf16: its s_i, into a slot
    // last read by the dQ staging two steps back.
    cute::cp_async_wait<0>();
    if (has_next) finish_stats(step + 1, stage ^ 1);
    cutlass::arch::fence_view_async_shared();  // dS stores visible to the wgmma (async proxy)
    if (wg_tid == 0) {
      // This warpgroup's last dQ boxes have left shared memory; deterministic: have been added.
      if constexpr (kDeterministic) {
        bulk_wait_complete();
        __threadfence();  // ordered before the turn's release by thread 0 below
      } else {
        cute::tma_store_wait<0>();
      }
    }
    __syncthreads();  // the dS barrier: both warpgroups' keys of dS written
    if constexpr (kDeterministic) {
      // Both warpgroups' additions of the last step are in global memory, so its dQ turn passes
      // on here, a step late but off the critical path (the next block in the turn order wants
      // it only at its own dQ reduction of a step later).
      if (pending_turn >= 0) {
        if (tid == 0) pass_turn(p.dq_sema + pending_turn);
        pending_turn = -1;
      }
    }

    // dQ's row factors, loaded while the dQ GEMM runs: scale for fp16; for bf16 also 2^-eK / s_i
    // (bwd_ds_scale_sm90.h).
    cute::array<float, 2 * kBlockM / 64> dq_factors;
    if constexpr (Traits::kScaledDs) {
      dq_factors = dq_row_factors<Traits>(s.ds_scale[step % Traits::kScaleSlots], s.dq_scale, tid);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < static_cast<int>(dq_factors.size()); ++i) dq_factors[i] = p.scale;
    }
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    wgmma_gemm<true, 0>(mma_dq, tdQrdS(_, _, _, ds_stage), tdQrKt, acc_dq);  // also retires dV and dK
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(acc_dv);
    scale_dq_rows<Traits>(dq, acc_dq, dq_factors);
    // Every wgmma of this warpgroup that reads this Q / dO stage has completed (the wait above
    // covers the whole warpgroup's batches). The second warpgroup to get here refills the stage.
    if (wg_tid == 0) {
      ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_block> released(s.qdo_released[stage]);
      const uint32_t before = released.fetch_add(1u, ::cuda::memory_order_acq_rel);
      if ((before & 1u) != 0 && step + kStages < num_steps) load_qdo(next_pos(pos1), stage);
    }
    prev_pos = pos;
    pos = pos1;
  }
  if (num_steps > 0) stage_and_reduce_dq(prev_pos);

  if (wg_tid == 0) {
    bulk_wait_complete();  // no TMA reduction may outlive the block's shared memory
    if (kDeterministic && pending_turn >= 0) __threadfence();
  }
  if (kDeterministic && pending_turn >= 0) {
    __syncthreads();  // both warpgroups' last additions are in global memory
    if (tid == 0) pass_turn(p.dq_sema + pending_turn);
  }

  // ---- dK (times scale: S was scale * Q K^T) and dV; a non-finite one raises the guard's flag
  sm80::store_dkv<Traits>(p, geo, thr_dkv, acc_dk, acc_dv, b, hk, n0, geo.len_k - n0, 1.0f, &p.numerics->nonfinite);
#endif
}

}  // namespace flashtrain::cuda::sm90
