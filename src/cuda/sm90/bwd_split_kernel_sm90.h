// Backward stage 2 on Hopper for D = 256: the split-D main kernel (bwd_split_traits_sm90.h), between
// the same sm80 preprocess and postprocess as bwd_kernel_sm90.h, on the same producer warpgroup
// (bwd_producer_sm90.h: TMA loads of K, V, Q and dO, the row statistics).
//
// Per step (one 64-row Q tile of one query head), consumer w (queries [32 w, 32 w + 32) of S^T
// and dP^T, columns [128 w, 128 w + 128) of dK, dV and dQ):
//   S^T  = K Q^T, dP^T = V dO^T      (wgmma, both in flight; dP^T also during the softmax)
//   P^T  = exp2(S^T * scale log2e - lse log2e)  -> shared memory, then a barrier of both consumers
//   dV  += P^T dO                    (wgmma, in flight while dS^T is computed)
//   dS^T = P^T * (dP^T - D)          -> shared memory, then a barrier of both consumers
//   dQ = dS K, dK += dS^T Q          (wgmma)
//   scale * dQ copied to registers of its own; its atomic additions into dq_accum (vector reductions,
//   bwd_dq_atomics_sm90.h) run at the top of step t + 1, once that step's S^T GEMM is issued, while
//   the tensor cores have S^T and step t's dK
//   (kDeterministic: in the step's turn of tile_range.h's schedule, taken by one thread for both
//   consumers; the producer's turn warp passes the turn on once the atomics are visible,
//   bwd_pass_dq_turns, so that the consumers go on while they drain)
// P^T and dS^T alternate between two buffers by step parity: a consumer writes step t + 1's while
// the other may still read step t's (its dV and dQ GEMMs retire at the end of its step t and its dK
// GEMM early in step t + 1, before it reaches that step's first barrier, which comes before step
// t + 2's writes).
// dK (times scale) and dV are written once at the end.
// The rotated loop made the backward 2-4% faster (default) and 3-7% (deterministic) than dQ's
// additions behind the dK GEMM alone, H100, bench/results/2026-12-07_run28. Two earlier forms of it
// were 12-23% slower because ptxas serialised their wgmmas (C7515 / C7514 / C7518,
// bench/results/2026-12-06_run27); scripts/ptxas_check.sh reports these notes.
// Moving the cluster pair's dQ exchange there too, behind the S^T issue on the scaled copies, made
// the default backward 2-4% slower (run 29; reasoned: the step's atomics start later).
//
// Cluster pairs (Traits::kClusterN == 2; deterministic only with kPairDq): the blocks of key tiles
// 2 j and 2 j + 1 of a (batch, KV head) run as one cluster and both walk the Q tiles that see
// either tile, in the same order; each loads half of every Q / dO tile into both (bwd_load_tiles), halving those L2 reads,
// which are half of the kernel's L2 traffic (bench/results/2026-12-05_run22: L2-bound at 82% of
// peak). A step whose query rows do not see this block's keys runs masked (P = dS = 0). A block
// past the keys (the pair's second under an odd tile count or a short varlen sequence) loads no
// K / V, computes nothing and only serves its half of the loads.
// kPairDq (both blocks inside the keys): the pair also sums dQ before adding it, each block adding
// half of the columns for both (send_dq), which halves the reductions, the other half of the L2
// traffic. Deterministic, the pair takes each Q tile's dQ turn as one block of twice the keys
// (take_dq_turn), each block passing half of it on.
#pragma once
#include <cute/arch/cluster_sm90.hpp>
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
#include "bwd_split_traits_sm90.h"
#include "device_code_sm90.h"
#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

// A pair's exchange of dQ halves (kPairDq): the bytes one warpgroup sends, its 64 x 128 fp32 share.
template <class Traits>
constexpr uint32_t kDqHalfBytes = Traits::kBlockM * (Traits::kHeadDim / 2) * 4;

// Cluster pair summing dQ, in two parts. Block r owns dQ's columns [128 r, 128 r + 128), which its
// warpgroup r computes. send_dq, at the end of step `step` once both warpgroups' dQ of the step
// is in acc_dq: warpgroup 1 - r sends its share of the other columns to the peer's warpgroup
// 1 - r, the owner there (same thread layout: thread j's fragment covers the same (row, column)s
// in both blocks), and adds nothing itself. The share travels by st.async into the receiver's dO
// buffer of the step's stage (32 KB, as large as the share), free once both of the receiver's
// warpgroups have completed their dV GEMMs (kDvRetired, then the owner's word by a remote arrive
// on the sender's dq_send_free); it lands on the receiver's dq_recv_full, which expects the bytes.
// The owner waits for the share at the top of step + 1, once that step's S^T GEMM is issued, and
// adds scale * share to its scaled copy as each reduction goes out (add_rows_reduce_with_share).
// Until run 34 it waited at the end of the step, before the next S^T issue (the kernel's largest
// consumer wait: 9.7% of its stall samples, run 32). The stage is released (stage_empty) only
// after the owner has read it, so the producers' next multicast into it comes after.
template <class Traits>
__device__ __forceinline__ uint32_t dq_share_slot(typename Traits::SharedStorage& s, int stage, int mma_tid) {
  // Thread j's v-th four values at ((v * 128) + j) * 16 bytes: 16-byte accesses, consecutive threads adjacent.
  return cute::cast_smem_ptr_to_uint(s.dout.data() + stage * Traits::kBlockM * Traits::kHeadDim) +
         static_cast<uint32_t>(mma_tid % Traits::kThreadsPerWarpGroup) * 16u;
}

template <class Traits, class Acc>
__device__ __forceinline__ void send_dq(typename Traits::SharedStorage& s, Acc const& acc_dq, int stage, int step,
                                        int rank, int mma_tid) {
  using namespace cute;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::ClusterTransactionBarrier;
  using cutlass::arch::NamedBarrier;
  constexpr int kWgThreads = Traits::kThreadsPerWarpGroup;
  constexpr int kVecs = decltype(size(acc_dq))::value / 4;
  static_assert(kVecs * 4 * 4 * kWgThreads == kDqHalfBytes<Traits>, "a warpgroup's dQ share is the half tile");
  const int peer = rank ^ 1;
  NamedBarrier::sync(Traits::kNumMmaThreads, static_cast<uint32_t>(BwdSplitBarrier::kDvRetired));
  if (mma_tid / kWgThreads == rank) {  // the owner: this block's buffer is free for the peer's share
    if (mma_tid % kWgThreads == 0) {
      ClusterBarrier::arrive(&s.dq_send_free, static_cast<uint32_t>(peer), 1u);
      ClusterTransactionBarrier::arrive_and_expect_tx(&s.dq_recv_full, kDqHalfBytes<Traits>);
    }
    return;
  }
  ClusterBarrier::wait(&s.dq_send_free, static_cast<uint32_t>(step & 1));
  const uint32_t remote = cute::set_block_rank(dq_share_slot<Traits>(s, stage, mma_tid), static_cast<uint32_t>(peer));
  const uint32_t remote_bar = cute::set_block_rank(cute::cast_smem_ptr_to_uint(&s.dq_recv_full), static_cast<uint32_t>(peer));
  CUTLASS_PRAGMA_UNROLL
  for (int v = 0; v < kVecs; ++v) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n"
                 ::"r"(remote + static_cast<uint32_t>(v * kWgThreads * 16)), "f"(acc_dq(4 * v)), "f"(acc_dq(4 * v + 1)),
                 "f"(acc_dq(4 * v + 2)), "f"(acc_dq(4 * v + 3)), "r"(remote_bar)
                 : "memory");
  }
}

template <class Traits, bool kDeterministic, bool kPairDq = false>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    bwd_split_kernel_sm90(const __grid_constant__ BwdKernelParams<Traits> kp) {
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
  using TileSdP = Shape<Int<kBlockN>, Int<kBlockM>>;
  static_assert(Traits::kStagesPdS == 2, "P^T / dS^T buffers alternate by step parity");
  constexpr int kCluster = Traits::kClusterN;
  static_assert(kCluster == 1 || !kDeterministic || kPairDq, "deterministic cluster pairs sum dQ in the pair");
  static_assert(!kPairDq || kCluster == 2, "dQ is summed within a cluster pair");
  static_assert(kDqHalfBytes<Traits> == sizeof(Element) * kBlockM * kHeadDim, "a dQ half fills one dO stage");

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
  // The keys of the cluster (kCluster adjacent tiles, together in or past the sequence).
  const int cluster_n0 = n_block / kCluster * kCluster * kBlockN;
  if (cluster_n0 >= geo.len_k) return;
  const bool live = n0 < geo.len_k;
  // Both blocks of the pair inside the keys: they sum dQ (a block past the keys adds nothing).
  const bool pair_dq = kPairDq && cluster_n0 + kBlockN < geo.len_k;
  const int rank = kCluster > 1 ? static_cast<int>(cute::block_rank_in_cluster()) : 0;
  const MaskSpec mask = geo.mask(p);
  const BwdWalk walk =
      make_bwd_walk<kBlockM, kBlockN * kCluster>(p, mask, geo.len_q, n_block / kCluster, cluster_n0, hq_begin);
  const int num_steps = walk.num_steps;

  const int warp = tid / 32;
  if (warp == 0 && cute::elect_one_sync()) {
    init_load_barriers<Traits>(kp, s);
    if constexpr (kPairDq) {
      ClusterBarrier::init(&s.dq_recv_full, 1);
      ClusterBarrier::init(&s.dq_send_free, 1);
    }
    if constexpr (kDeterministic) {
      for (int i = 0; i < 2; ++i) {
        ClusterBarrier::init(&s.dq_issued[i], kMmaThreads);
        ClusterBarrier::init(&s.dq_passed[i], 1);
      }
    }
    cutlass::arch::fence_barrier_init();
  }
  if constexpr (kCluster > 1) {
    cute::cluster_sync();  // both blocks' barriers initialised before either multicasts or arrives
  } else {
    __syncthreads();
  }

  if (tid < Traits::kThreadsPerWarpGroup) {  // ---- the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp == 0) {
      if (num_steps > 0 && cute::elect_one_sync()) bwd_load_tiles<Traits>(kp, s, walk, b, hk, n_block, live);
    } else if (warp == 1) {  // a block past the keys adds nothing and passes no turn
      if (kDeterministic && live && tid % 32 == 0) bwd_pass_dq_turns<Traits>(p, s, walk, b, kCluster > 1 && !pair_dq ? 2 : 1);
    } else if (warp >= Traits::kStatsWarp) {
      bwd_fetch_stats<Traits, /*kStatsCopyK=*/false>(p, geo, s, walk, tid - Traits::kStatsWarp * 32);
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int mma_tid = tid - Traits::kThreadsPerWarpGroup;
  if (kCluster > 1 && !live) {  // past the keys: only release each stage once both halves landed
    for (int step = 0; step < num_steps; ++step) {
      ClusterBarrier::wait(&s.qdo_full[step % kStages], static_cast<uint32_t>((step / kStages) & 1));
      ClusterBarrier::arrive(&s.stage_empty[step % kStages]);
    }
    return;
  }

  // ---- shared memory ----------------------------------------------------------------------
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sKt = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutKt{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdO{});
  Tensor sQt = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQdOt{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutQdO{});
  Tensor sdOt = make_tensor(make_smem_ptr(s.dout.data()), typename Traits::SmemLayoutQdOt{});
  Tensor sP = make_tensor(make_smem_ptr(s.p.data()), typename Traits::SmemLayoutPdS{});
  Tensor sdS = make_tensor(make_smem_ptr(s.ds.data()), typename Traits::SmemLayoutPdS{});
  Tensor sdSt = make_tensor(make_smem_ptr(s.ds.data()), typename Traits::SmemLayoutdSt{});

  // ---- MMA partitions ----------------------------------------------------------------------
  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_tid);
  auto thr_dkv = mma_dkv.get_thread_slice(mma_tid);
  auto thr_dq = mma_dq.get_thread_slice(mma_tid);

  Tensor tSrK = thr_sdp.partition_fragment_A(sK);  // descriptors: every key, all of D
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);  // this warpgroup's queries (MMA, MMA_N, MMA_K, stages)
  Tensor tdPrV = thr_sdp.partition_fragment_A(sV);
  Tensor tdPrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tdVrP = thr_dkv.partition_fragment_A(sP);      // (MMA, MMA_M, MMA_K, buffers)
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);  // this warpgroup's columns (.., stages)
  Tensor tdKrdS = thr_dkv.partition_fragment_A(sdS);
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdSt);  // (MMA, MMA_M, MMA_K, buffers)
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKt);

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);

  // (key, query) coordinates of this thread's S^T elements inside the tile.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileSdP{}));
  Tensor coords = make_tensor(tScS.data(), accumulator_rowcol(tScS.layout()));

  // Both consumers' 16-bit tile of the step in a P^T / dS^T buffer (bwd_smem_stores_sm90.h),
  // visible to the wgmmas.
  const uint32_t p_smem = cute::cast_smem_ptr_to_uint(s.p.data());
  const uint32_t ds_smem = cute::cast_smem_ptr_to_uint(s.ds.data());
  auto publish = [&](auto const& acc, uint32_t smem, int buffer, BwdSplitBarrier barrier) {
    Tensor rounded = make_tensor_like<Element>(acc);
    convert_fragment(acc, rounded);
    store_pds<Traits>(smem, rounded, buffer, mma_tid);
    cutlass::arch::fence_view_async_shared();  // generic stores visible to the async proxy
    NamedBarrier::sync(kMmaThreads, static_cast<uint32_t>(barrier));
  };

  // Deterministic: one thread takes the step's dQ turn at Q tile (pos, m0) once the turn warp has
  // passed step - 2's on (dq_issued's slot is free). A cluster pair takes its turn as one block
  // of kCluster * kBlockN keys, each of its blocks passing half of it on: the pair's turn has come
  // once the count reaches twice the turn, whichever block of the pair before passed first.
  auto take_dq_turn = [&](int step, const DqWalkPos& at, int m0) {
    if (step >= 2) ClusterBarrier::wait(&s.dq_passed[step % 2], static_cast<uint32_t>((step / 2 - 1) & 1));
    int* sema = sm80::dq_semaphore(p, b, at.head, at.m_block);
    const int turn =
        dq_turn(mask, p.dq_rotated, n_block / kCluster, m0, min(m0 + kBlockM, geo.len_q), kBlockN * kCluster);
    sm80::spin_until_dq_turn(sema, kCluster * turn);
  };

  // Step t's dQ additions (kDeterministic: in its turn) and the release of its stage run at the top
  // of step t + 1, once that step's S^T GEMM is issued: the tensor cores have S^T (and step t's dK)
  // while the additions go out, and step t + 1 finds S^T computed. What crosses the loop's back edge
  // is scale * dQ in registers of its own, taken at the end of step t: ptxas serialises every wgmma
  // of the loop when ordinary instructions write an accumulator that crosses it (C7515: S^T
  // carried, the softmax writing it), read one while another wgmma is in flight (C7514: the
  // accumulator itself carried and read by the additions) and, with a plain copy of it carried,
  // too (C7518), which the product by the scale does not draw (ptxas, nvcc 13.0).
  Tensor dq = make_fragment_like(partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  // dq_accum's Q tile m0 of query head `head`; dq added into it (rows past the sequence left out).
  auto dq_tile = [&](int head, int m0) {
    return p.dq_accum + (static_cast<int64_t>(geo.row_q + m0) * p.heads_q + head) * kHeadDim;
  };
  const int64_t dq_row_stride = static_cast<int64_t>(p.heads_q) * kHeadDim;
  auto add_dq_tile = [&](int head, int m0) {
    add_rows_reduce<kBlockM, kHeadDim>(dq_tile(head, m0), dq_row_stride, thr_dq, dq, geo.len_q - m0);
  };
  auto add_dq = [&](int step, const DqWalkPos& at) {
    const int m0 = at.m_block * kBlockM;
    if (kPairDq && pair_dq) {
      // The owner of these columns (warpgroup `rank`) adds the pair's sum, its own scaled dQ plus
      // the share the other block sent at the end of the step (send_dq); the other adds nothing.
      // Deterministic: in the pair's turn, which the turn warp passes on (bwd_pass_dq_turns).
      constexpr int kWgThreads = Traits::kThreadsPerWarpGroup;
      if (mma_tid / kWgThreads == rank) {
        // The peer's share before the turn: the turn is then held only for the additions.
        ClusterBarrier::wait(&s.dq_recv_full, static_cast<uint32_t>(step & 1));
        if constexpr (kDeterministic) {
          if (mma_tid % kWgThreads == 0) take_dq_turn(step, at, m0);
          NamedBarrier::sync(kWgThreads, static_cast<uint32_t>(BwdSplitBarrier::kDqTurn));
        }
        add_rows_reduce_with_share<kBlockM, kHeadDim, kWgThreads * 16>(
            dq_tile(at.head, m0), dq_row_stride, thr_dq, dq, geo.len_q - m0,
            dq_share_slot<Traits>(s, step % kStages, mma_tid), p.scale);
      }
      if constexpr (kDeterministic) ClusterBarrier::arrive(&s.dq_issued[step % 2]);
    } else if constexpr (kDeterministic) {
      // In the step's turn, which the turn warp passes on (bwd_pass_dq_turns).
      if (mma_tid == 0) take_dq_turn(step, at, m0);
      NamedBarrier::sync(kMmaThreads, static_cast<uint32_t>(BwdSplitBarrier::kDqTurn));
      add_dq_tile(at.head, m0);
      ClusterBarrier::arrive(&s.dq_issued[step % 2]);
    } else {
      add_dq_tile(at.head, m0);
    }
  };
  // At the end of step t, with only its dK GEMM in flight: a cluster pair sends its share of dQ
  // (send_dq; the owner adds it at the top of step t + 1), then the copy.
  auto take_dq = [&](auto& acc_dq, int step) {
    warpgroup_wait<1>();  // dV and dQ retired; dK may be in flight
    warpgroup_fence_operand(acc_dq);
    if (kPairDq && pair_dq) send_dq<Traits>(s, acc_dq, step % kStages, step, rank, mma_tid);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(dq); ++i) dq(i) = acc_dq(i) * p.scale;
    warpgroup_fence_operand(dq);
  };
  // After the additions: every wgmma of this warpgroup that reads the stage's Q or dO has
  // completed (the caller's wait), and so have its reads of the statistics.
  auto release_stage = [&](int step) {
    ClusterBarrier::arrive(&s.stage_empty[step % kStages]);
  };

  if (num_steps > 0) ClusterBarrier::wait(&s.kv_full, 0);
  DqWalkPos pos = walk.first;
  DqWalkPos prev = pos;
  CUTLASS_PRAGMA_NO_UNROLL
  for (int step = 0; step < num_steps; ++step) {
    const int stage = step % kStages;
    const int buf = step % Traits::kStagesPdS;
    const int m0 = pos.m_block * kBlockM;
    const uint32_t stage_parity = static_cast<uint32_t>((step / kStages) & 1);

    ClusterBarrier::wait(&s.qdo_full[stage], stage_parity);
    Tensor tSrS = partition_fragment_C(mma_sdp, TileSdP{});
    wgmma_gemm<true, -1>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS);
    // Every wait unconditional (at step 0 nothing but this S^T is in flight): a wait that only some
    // paths take makes ptxas inject its own and serialise the wgmmas (C7517 / C7518).
    if (step > 0) add_dq(step - 1, prev);
    warpgroup_wait<1>();  // step - 1's dK retired
    if (step > 0) release_stage(step - 1);
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
    Tensor scores = make_tensor(tSrS.data(), accumulator_rowcol(tSrS.layout()));
    if (interior) {
      probabilities<false, true>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    } else {
      probabilities<true, true>(scores, coords, stage_lse2, p.scale_log2, mask, m0, n0, geo.len_q);
    }
    publish(tSrS, p_smem, buf, BwdSplitBarrier::kPWritten);
    wgmma_gemm<false, -1>(mma_dkv, tdVrP(_, _, _, buf), tdVrdOt(_, _, _, stage), acc_dv);

    warpgroup_wait<1>();  // dP^T landed; dV may still be in flight
    warpgroup_fence_operand(tdPrdP);
    Tensor dp = make_tensor(tdPrdP.data(), accumulator_rowcol(tdPrdP.layout()));
    dscores<true>(dp, scores, coords, stage_dsum);
    publish(tdPrdP, ds_smem, buf, BwdSplitBarrier::kDsWritten);
    // dQ before dK: its additions go out while the dK GEMM (and the next S^T) runs.
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    wgmma_gemm<true, -1>(mma_dq, tdQrdS(_, _, _, buf), tdQrKt, acc_dq);
    wgmma_gemm<false, -1>(mma_dkv, tdKrdS(_, _, _, buf), tdKrQt(_, _, _, stage), acc_dk);
    take_dq(acc_dq, step);
    prev = pos;
    pos = walk.next(pos);
  }
  if (num_steps > 0) add_dq(num_steps - 1, prev);
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_dk);
  warpgroup_fence_operand(acc_dv);
  if (num_steps > 0) release_stage(num_steps - 1);

  // ---- dK (times scale) and dV, straight from the accumulators.
  sm80::store_dkv<Traits>(p, geo, thr_dkv, acc_dk, acc_dv, b, hk, n0, geo.len_k - n0, 1.0f, &p.numerics->nonfinite);
#endif
}

}  // namespace flashtrain::cuda::sm90
