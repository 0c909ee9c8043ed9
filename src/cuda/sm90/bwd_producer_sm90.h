// The producer warpgroup of the sm90 backward main kernels (bwd_kernel_sm90.h; the split-D and
// wide-key-tile kernels use its parts): one thread of warp 0 loads K and V once and each step's Q
// and dO by TMA; warps 2 and 3 fetch each step's row statistics; one thread of warp 1 adds each
// step's staged dQ into dq_accum by TMA reductions (in the deterministic turns of tile_range.h when
// kDeterministic), or, where the consumers add dQ themselves, passes their deterministic turns on.
// All three run stages / a staging tile ahead of or behind the consumers, on the mbarriers of
// SharedStorage.
#pragma once
#include <cmath>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../../common/mask.h"
#include "../sm80/bwd_epilogue.h"
#include "../sm80/bwd_params.h"
#include "bwd_ds_scale_sm90.h"
#include "bwd_params_sm90.h"

namespace flashtrain::cuda::sm90 {

// Parity of the stage_empty phase that frees `step`'s stage (step >= kStages): the release of
// step - kStages.
template <class Traits>
__device__ __forceinline__ uint32_t stage_free_parity(int step) {
  return static_cast<uint32_t>((step / Traits::kStages - 1) & 1);
}

// One thread, before the block's first __syncthreads: prefetches the load descriptors and
// initialises the barriers of the loads (K and V; each stage's Q / dO and row statistics; each
// stage's release by the consumers). The kernel adds its own and fences.
// kStatsThreads: how many threads fetch the row statistics (bwd_fetch_stats).
template <class Traits, int kStatsThreads = Traits::kStatsThreads>
__device__ __forceinline__ void init_load_barriers(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& s) {
  using cutlass::arch::ClusterBarrier;
  cute::prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
  cute::prefetch_tma_descriptor(kp.tma_do.get_tma_descriptor());
  cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
  cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
  ClusterBarrier::init(&s.kv_full, 1);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < Traits::kStages; ++i) {
    ClusterBarrier::init(&s.qdo_full[i], 1);
    ClusterBarrier::init(&s.stats_full[i], kStatsThreads);
    ClusterBarrier::init(&s.stage_empty[i], Traits::kNumMmaThreads);
    if constexpr (Traits::kClusterN > 1) ClusterBarrier::init(&s.peer_empty[i], Traits::kClusterN - 1);
  }
}

// One thread: K and V of key tile n_block of KV head hk into shared memory, on kv_full.
template <class Traits>
__device__ __forceinline__ void bwd_load_kv(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& s, int b,
                                            int hk, int n_block) {
  using namespace cute;
  using cutlass::arch::ClusterTransactionBarrier;
  using TileKV = Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>;
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutKV{});
  Tensor gK = local_tile(kp.tma_k.get_tma_tensor(kp.shape_k)(_, _, hk, b), TileKV{}, make_coord(n_block, _0{}));
  Tensor gV = local_tile(kp.tma_v.get_tma_tensor(kp.shape_k)(_, _, hk, b), TileKV{}, make_coord(n_block, _0{}));
  auto cta_k = kp.tma_k.get_slice(_0{});
  auto cta_v = kp.tma_v.get_slice(_0{});
  ClusterTransactionBarrier::arrive_and_expect_tx(&s.kv_full, 2 * Traits::kTmaBytesKV);
  copy(kp.tma_k.with(s.kv_full), cta_k.partition_S(gK), cta_k.partition_D(sK));
  copy(kp.tma_v.with(s.kv_full), cta_v.partition_S(gV), cta_v.partition_D(sV));
}

// One thread: K and V of the block's key tile (unless !load_kv: a cluster pair's block past the
// keys, which only serves its half of the Q / dO loads), then Q and dO of every step into its
// stage. Cluster pair (Traits::kClusterN == 2): both blocks walk the same steps; each loads its
// half of a step's Q and dO into the stage of both blocks (TMA multicast), so before refilling a
// stage it tells the peer that its own consumers are done with it (a remote arrive on the peer's
// peer_empty) and waits for the peer to say the same. Each block's qdo_full still expects the
// whole tile's bytes, half of which the peer's multicast brings.
template <class Traits>
__device__ __forceinline__ void bwd_load_tiles(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& s,
                                               const BwdWalk& walk, int b, int hk, int n_block, bool load_kv = true) {
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = Traits::kBlockM, kHeadDim = Traits::kHeadDim;
  constexpr bool kPair = Traits::kClusterN > 1;
  if (load_kv) bwd_load_kv<Traits>(kp, s, b, hk, n_block);
  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdO{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutQdO{});
  const int rank = kPair ? static_cast<int>(cute::block_rank_in_cluster()) : 0;
  constexpr uint16_t kEveryBlock = (1u << Traits::kClusterN) - 1;  // the multicast's targets (unused alone)
  auto cta_q = kp.tma_q.get_slice(rank);
  auto cta_do = kp.tma_do.get_slice(rank);
  DqWalkPos pos = walk.first;
  for (int step = 0; step < walk.num_steps; ++step) {
    const int stage = step % Traits::kStages;
    if (step >= Traits::kStages) {
      ClusterBarrier::wait(&s.stage_empty[stage], stage_free_parity<Traits>(step));
      if constexpr (kPair) {
        ClusterBarrier::arrive(&s.peer_empty[stage], static_cast<uint32_t>(rank ^ 1), 1u);
        ClusterBarrier::wait(&s.peer_empty[stage], stage_free_parity<Traits>(step));
      }
    }
    // TMA zero-fills rows past Sq.
    Tensor mQ = kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor mdO = kp.tma_do.get_tma_tensor(kp.shape_q)(_, _, pos.head, b);
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    Tensor gdO = local_tile(mdO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(pos.m_block, _0{}));
    ClusterTransactionBarrier::arrive_and_expect_tx(&s.qdo_full[stage], 2 * Traits::kTmaBytesQ);
    copy(kp.tma_q.with(s.qdo_full[stage], kEveryBlock), cta_q.partition_S(gQ), cta_q.partition_D(sQ(_, _, stage)));
    copy(kp.tma_do.with(s.qdo_full[stage], kEveryBlock), cta_do.partition_S(gdO), cta_do.partition_D(sdO(_, _, stage)));
    pos = walk.next(pos);
  }
}

// The statistics warps (thread 0 .. kStatsThreads - 1; Traits::kStatsThreads but for the deterministic
// D 128 kernel, whose second dQ warp takes one of them): each step's lse * log2e and D of its rows
// into its stage (bf16 inputs: also s_i, bwd_ds_scale_sm90.h, and into their slot dQ's row factors);
// rows past the sequence get lse = +inf (so P = 0), D = 0 and s_i = 1. bf16: s_i needs the tile's
// max |V|, which the consumers publish through vmax_ready, or with kStatsCopyK (bwd_ds_scale_sm90.h)
// these warps find themselves; they then make K's fp16 copy once step 0's statistics are out, and
// announce it by kdq_ready.
template <class Traits, bool kStatsCopyK, int kStatsThreads = Traits::kStatsThreads>
__device__ __forceinline__ void bwd_fetch_stats(const sm80::BwdParams& p, const sm80::SeqGeometry& geo,
                                                typename Traits::SharedStorage& s, const BwdWalk& walk,
                                                int thread) {
  using cutlass::arch::ClusterBarrier;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kRowsPerThread = kBlockM / kStatsThreads;
  static_assert(kBlockM % kStatsThreads == 0, "whole rows per statistics thread");
  float v_max = 0.0f, dq_scale = 0.0f;
  int k_exp = 0;
  DqWalkPos pos = walk.first;
  for (int step = 0; step < walk.num_steps; ++step) {
    const int stage = step % Traits::kStages;
    if (step >= Traits::kStages) ClusterBarrier::wait(&s.stage_empty[stage], stage_free_parity<Traits>(step));
    const int m0 = pos.m_block * kBlockM;
    const int64_t first = static_cast<int64_t>(pos.head) * p.total_q + geo.row_q + m0;
    float lse[kRowsPerThread], dsum[kRowsPerThread], f[kRowsPerThread];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = thread + i * kStatsThreads;
      const bool inside = m0 + row < geo.len_q;
      lse[i] = inside ? p.lse_log2[first + row] : INFINITY;
      dsum[i] = inside ? p.dsum[first + row] : 0.0f;
      if constexpr (Traits::kScaledDs) f[i] = inside ? p.do_scale[first + row] : 1.0f;
    }
    if constexpr (Traits::kScaledDs) {
      if (step == 0) {  // while the loads above are in flight
        if constexpr (kStatsCopyK) {
          ClusterBarrier::wait(&s.kv_full, 0);
          tile_abs_maxima<Traits, kStatsThreads, BwdBarrier::kStatsMaxima>(s.k.data(), s.v.data(), s.scratch,
                                                                         thread, v_max, k_exp);
          dq_scale = p.scale * exact_pow2(-k_exp);  // a row's dQ factor, but for 1 / s_i
        } else {
          ClusterBarrier::wait(&s.vmax_ready, 0);
          v_max = s.v_max;
          dq_scale = s.dq_scale;
        }
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = thread + i * kStatsThreads;
      s.lse_log2[stage][row] = lse[i];
      s.dsum[stage][row] = dsum[i];
      if constexpr (Traits::kScaledDs) {
        const float si = row_scale<Traits>(f[i], dsum[i], v_max);
        s.ds_scale[stage][row] = si;
        s.dq_factor[step % 3][row] = dq_scale * inverse_pow2(si);
      }
    }
    ClusterBarrier::arrive(&s.stats_full[stage]);
    if constexpr (kStatsCopyK) {
      if (step == 0) {
        convert_k_for_dq<Traits, kStatsThreads>(s.k.data(), s.k_dq.data(), k_exp, thread);
        ClusterBarrier::arrive(&s.kdq_ready);
      }
    }
    pos = walk.next(pos);
  }
}

// Deterministic: one thread of the producer's warp 1 passes each step's dQ turn on, in step order,
// once the consumers have issued the step's atomics (dq_issued) and a fence has made them visible
// at device scope: the mbarrier orders every consumer's atomics before the fence (as a CTA barrier
// before a grid sync's fence does), so the consumers need not wait for their atomics to drain.
// dq_passed tells the consumers that the parity's slot may take the step two later. A cluster
// pair's turn is two passes, one a block; `passes` 2 for a block that adds its pair's share alone.
template <class Traits>
__device__ __forceinline__ void bwd_pass_dq_turns(const sm80::BwdParams& p, typename Traits::SharedStorage& s,
                                                  const BwdWalk& walk, int b, int passes) {
  using cutlass::arch::ClusterBarrier;
  DqWalkPos pos = walk.first;
  for (int step = 0; step < walk.num_steps; ++step) {
    ClusterBarrier::wait(&s.dq_issued[step % 2], static_cast<uint32_t>((step / 2) & 1));
    __threadfence();
    sm80::release_dq_turn(sm80::dq_semaphore(p, b, pos.head, pos.m_block), passes);
    ClusterBarrier::arrive(&s.dq_passed[step % 2]);
    pos = walk.next(pos);
  }
}

// Waits until this thread's bulk groups (the TMA reductions) have completed, and orders their
// (async-proxy) global writes before this thread's later generic-proxy operations.
__device__ __forceinline__ void bulk_wait_complete() {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// One thread of kThreads (kThreads - 1 other warps' threads, `first` 0 .. kThreads - 1): steps
// first, first + kThreads, ... of the walk's staged dQ (all kHeadDim columns) added into dq_accum by
// TMA reductions. The staging tile is released as soon as the reductions have read it.
// kDeterministic: in the step's turn of tile_range.h's schedule, passed on once the additions are
// complete in global memory and fenced. That drain is a thread's serial chain a step (turn's poll,
// reductions, their completion, fence, release: about 2.8 us on the H100, longer than the D 128
// consumers' 2.1 us step; bench/results/2026-12-07_run55), and TMA bulk groups are a thread's
// own, so the deterministic D 128 kernel runs it on two threads of different warps taking
// alternate steps (9-19% faster backward than one, run 58). A thread takes step t once the other
// has released the staging of step t - 1, which puts dq_full's phase t - 1 behind it, so that
// waiting on dq_full by parity cannot skip a phase.
// Earlier forms: issuing the next step's reductions before the drain of this one's on one thread
// and passing this turn on behind them was 0-9% slower at D 64 and 128 (H100, bench/results/
// 2026-12-06_run27 call 1); a turn a 32-column box (four fences and polls a step) 0.55-0.63x at
// D 128 (run 55).
template <class Traits, bool kDeterministic, int kThreads = 1>
__device__ __forceinline__ void bwd_write_dq(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& s,
                                             const BwdWalk& walk, const MaskSpec& mask, const sm80::SeqGeometry& geo,
                                             int b, int n_block, int first = 0) {
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBoxes = Traits::kHeadDim / Traits::kDqBoxCols;
  const sm80::BwdParams& p = kp.p;
  auto cta = kp.tma_dq.get_slice(_0{});
  DqWalkPos pos = walk.first;
  for (int i = 0; i < first; ++i) pos = walk.next(pos);
  for (int step = first; step < walk.num_steps; step += kThreads) {
    if constexpr (kThreads > 1) {
      if (step > 0) ClusterBarrier::wait(&s.dq_empty, static_cast<uint32_t>((step - 1) & 1));
    }
    ClusterBarrier::wait(&s.dq_full, static_cast<uint32_t>(step & 1));
    int* sema = nullptr;
    if constexpr (kDeterministic) {
      const int m0 = pos.m_block * kBlockM;
      sema = sm80::dq_semaphore(p, b, pos.head, pos.m_block);
      sm80::spin_until_dq_turn(sema, dq_turn(mask, p.dq_rotated, n_block, m0, min(m0 + kBlockM, geo.len_q),
                                             Traits::kBlockN));
    }
    Tensor mdQ = kp.tma_dq.get_tma_tensor(kp.shape_dq)(_, _, pos.head, b);
    CUTLASS_PRAGMA_UNROLL
    for (int box = 0; box < kBoxes; ++box) {
      Tensor gdQ = local_tile(mdQ, Shape<Int<kBlockM>, Int<Traits::kDqBoxCols>>{}, make_coord(pos.m_block, box));
      Tensor sdQbox = make_tensor(make_smem_ptr(s.dq.data() + box * kBlockM * Traits::kDqBoxCols),
                                  typename Traits::SmemLayoutdQBox{});
      copy(kp.tma_dq, cta.partition_S(sdQbox), cta.partition_D(gdQ));
    }
    cute::tma_store_arrive();
    cute::tma_store_wait<0>();  // the staging tile has been read
    ClusterBarrier::arrive(&s.dq_empty);
    if constexpr (kDeterministic) {
      bulk_wait_complete();
      __threadfence();
      sm80::release_dq_turn(sema);
    }
    for (int i = 0; i < kThreads; ++i) pos = walk.next(pos);
  }
  bulk_wait_complete();  // no TMA reduction may outlive the block's shared memory
}

}  // namespace flashtrain::cuda::sm90
