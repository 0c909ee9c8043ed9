// Mainloop of the sm90 forward: the producer side (TMA loads of Q once and of K/V tiles through
// a kStages-deep shared-memory ring, completing on mbarriers) and the consumer side (S = Q K^T
// and O += P V on wgmma, online softmax in between).
//
// Consumer schedule, per warpgroup (64 query rows each):
//  * intra-warpgroup overlap: S(j+1) = Q K(j+1)^T is issued together with O += P(j) V(j), and the
//    softmax of S(j+1) runs while the P(j) V(j) GEMM is still in flight;
//  * inter-warpgroup turns: named barriers hand the right to issue GEMMs around the consumer
//    warpgroups (two: ping-pong; three at D = 64), so a warpgroup's softmax (MUFU/FMA bound)
//    overlaps the others' GEMMs (tensor-core bound).
// K tiles are visited from the last one down, so the boundary tile that needs masking (causal
// diagonal, ragged end of K) comes first and the interior tiles after it run unmasked.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "fwd_args_sm90.h"
#include "fwd_kernel_traits_sm90.h"
#include "fwd_mask_sm90.h"
#include "fwd_softmax_sm90.h"
#include "fwd_tile_scheduler_sm90.h"
#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

template <class Traits>
struct FwdMainloop {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  using TileShapeQK = typename Traits::TileShapeQK;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kStages = Traits::kStages;
  using Mask = BlockMask<kBlockM, kBlockN>;

  struct Params {
    typename Traits::TmaLoadQ tma_q;
    typename Traits::TmaLoadKV tma_k;
    typename Traits::TmaLoadKV tma_v;
    typename Traits::ShapeQKV shape_q;
    typename Traits::ShapeQKV shape_k;  // also V's (Dv == Dqk)
    int group;                          // query heads per KV head
  };

  static typename Traits::GmemLayoutQKV gmem_layout(int seqlen, int heads, int batch, const FwdStrides& s) {
    return cute::make_layout(cute::make_shape(seqlen, Traits::kHeadDim, heads, batch),
                             cute::make_stride(s.seq, cute::_1{}, s.head, s.batch));
  }

  static Params make_params(const FwdArgs& a) {
    using namespace cute;
    auto mQ = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.q)),
                          gmem_layout(a.seqlen_q, a.heads_q, a.batch, a.q_strides));
    auto mK = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.k)),
                          gmem_layout(a.seqlen_k, a.heads_k, a.batch, a.k_strides));
    auto mV = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.v)),
                          gmem_layout(a.seqlen_k, a.heads_k, a.batch, a.v_strides));
    // Out-of-bounds rows of the last Q / K / V tile are zero-filled by TMA: padded query rows
    // are never stored, padded key columns are masked (col_end <= seqlen_k).
    return Params{
        make_tma_copy(SM90_TMA_LOAD{}, mQ, typename Traits::SmemLayoutQ{}, select<0, 2>(TileShapeQK{}), _1{}),
        make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename Traits::SmemLayoutK{}), select<1, 2>(TileShapeQK{}), _1{}),
        make_tma_copy(SM90_TMA_LOAD{}, mV, take<0, 2>(typename Traits::SmemLayoutV{}), select<1, 2>(TileShapeQK{}), _1{}),
        mQ.shape(),
        mK.shape(),
        a.heads_q / a.heads_k};
  }

  static __device__ __forceinline__ void prefetch_descriptors(const Params& p) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
  }

  // One thread, before the block-wide barrier that publishes them.
  static __device__ __forceinline__ void init_barriers(SharedStorage& s) {
    using cutlass::arch::ClusterBarrier;
    ClusterBarrier::init(&s.q_full, 1);
    ClusterBarrier::init(&s.q_empty, Traits::kQEmptyArrivals);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kStages; ++i) {
      ClusterBarrier::init(&s.k_full[i], 1);  // the producer's arrive_and_expect_tx
      ClusterBarrier::init(&s.v_full[i], 1);
      ClusterBarrier::init(&s.k_empty[i], Traits::kNumMmaThreads);  // every consumer thread
      ClusterBarrier::init(&s.v_empty[i], Traits::kNumMmaThreads);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < 2; ++i) {
      ClusterBarrier::init(&s.tile_full[i], 1);                      // the producer
      ClusterBarrier::init(&s.tile_empty[i], Traits::kNumMmaThreads);  // every consumer thread
    }
    cutlass::arch::fence_barrier_init();
  }

  // Ring slot and mbarrier parity of the it-th K (or V) tile this block loads, counted over all
  // of its work tiles (producer and consumers count alike).
  static __device__ __forceinline__ int stage_of(int it) { return it % kStages; }
  static __device__ __forceinline__ uint32_t phase_of(int it) { return static_cast<uint32_t>((it / kStages) & 1); }

  // Producer: run by one elected thread for each work tile with mask.num_tiles() > 0. Loads
  // K(0), then Q once the previous tile's consumers freed its buffer, then for each tile K(it + 1)
  // before V(it), the order in which the consumers need them. `pipe_base` counts the K/V tiles
  // of earlier work tiles, `q_round` the earlier work tiles that loaded Q.
  static __device__ void load(const Params& p, SharedStorage& s, const WorkTile& tile, const Mask& mask,
                              int pipe_base, int q_round) {
    using namespace cute;
    using cutlass::arch::ClusterBarrier;
    using cutlass::arch::ClusterTransactionBarrier;
    Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutV{});
    const int kv_head = tile.head / p.group;
    Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q)(_, _, tile.head, tile.batch);
    Tensor mK = p.tma_k.get_tma_tensor(p.shape_k)(_, _, kv_head, tile.batch);
    Tensor mV = p.tma_v.get_tma_tensor(p.shape_k)(_, _, kv_head, tile.batch);
    Tensor gQ = local_tile(mQ, select<0, 2>(TileShapeQK{}), make_coord(tile.m_block, _0{}));  // (M, D)
    Tensor gK = local_tile(mK, select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));  // (N, D, n_blocks)
    Tensor gV = local_tile(mV, select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));
    auto cta_q = p.tma_q.get_slice(_0{});
    auto cta_k = p.tma_k.get_slice(_0{});
    auto cta_v = p.tma_v.get_slice(_0{});
    Tensor tQgQ = cta_q.partition_S(gQ);
    Tensor tQsQ = cta_q.partition_D(sQ);
    Tensor tKgK = cta_k.partition_S(gK);  // (TMA, TMA_N, TMA_K, n_blocks)
    Tensor tKsK = cta_k.partition_D(sK);  // (TMA, TMA_N, TMA_K, stages)
    Tensor tVgV = cta_v.partition_S(gV);
    Tensor tVsV = cta_v.partition_D(sV);

    const int num_tiles = mask.num_tiles();
    auto load_k = [&](int it) {
      const int stage = stage_of(pipe_base + it);
      ClusterBarrier::wait(&s.k_empty[stage], phase_of(pipe_base + it) ^ 1);  // first pass: free already
      ClusterTransactionBarrier::arrive_and_expect_tx(&s.k_full[stage], Traits::kTmaBytesKV);
      copy(p.tma_k.with(s.k_full[stage]), tKgK(_, _, _, mask.n_max - 1 - it), tKsK(_, _, _, stage));
    };
    auto load_v = [&](int it) {
      const int stage = stage_of(pipe_base + it);
      ClusterBarrier::wait(&s.v_empty[stage], phase_of(pipe_base + it) ^ 1);
      ClusterTransactionBarrier::arrive_and_expect_tx(&s.v_full[stage], Traits::kTmaBytesKV);
      copy(p.tma_v.with(s.v_full[stage]), tVgV(_, _, _, mask.n_max - 1 - it), tVsV(_, _, _, stage));
    };
    load_k(0);
    ClusterBarrier::wait(&s.q_empty, static_cast<uint32_t>(q_round & 1) ^ 1);
    ClusterTransactionBarrier::arrive_and_expect_tx(&s.q_full, Traits::kTmaBytesQ);
    copy(p.tma_q.with(s.q_full), tQgQ, tQsQ);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int it = 0; it < num_tiles; ++it) {
      if (it + 1 < num_tiles) load_k(it + 1);
      load_v(it);
    }
  }

  // Consumer: run by every consumer warpgroup (thread_idx in [0, kNumMmaThreads), warp_group in
  // [0, kNumMmaWarpGroups)) for each work tile with mask.num_tiles() > 0; pipe_base and q_round as in load().
  // Accumulates the unnormalised output of this thread's rows in tOrO (zeroed here) and leaves
  // the row statistics in `softmax`.
  template <class FragO, class Softmax>
  static __device__ void mma(const Params& p, SharedStorage& s, const WorkTile& tile, const Mask& mask,
                             int thread_idx, int warp_group, int pipe_base, int q_round, FragO& tOrO,
                             Softmax& softmax) {
    using namespace cute;
    using cutlass::arch::ClusterBarrier;
    using cutlass::arch::NamedBarrier;
    Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(s.v.data()), typename Traits::SmemLayoutVt{});

    typename Traits::TiledMmaQK mma_qk;
    typename Traits::TiledMmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(thread_idx);
    auto thr_pv = mma_pv.get_thread_slice(thread_idx);
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);   // smem descriptors
    Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stages)
    Tensor tSrS = partition_fragment_C(mma_qk, select<0, 1>(TileShapeQK{}));
    Tensor scores = make_tensor(tSrS.data(), accumulator_rowcol(tSrS.layout()));
    Tensor tOrP = make_tensor<Element>(accumulator_as_a_operand(tSrS.layout()));
    static_assert(decltype(size<2>(tOrP))::value == decltype(size<2>(tOrV))::value,
                  "P's k-blocks must match V's");
    Tensor o_rowcol = make_tensor(tOrO.data(), accumulator_rowcol(tOrO.layout()));
    static_assert(decltype(size<0>(o_rowcol))::value == decltype(size<0>(scores))::value,
                  "S and O must give a thread the same rows");
    Tensor tScS = thr_qk.partition_C(make_identity_tensor(select<0, 1>(TileShapeQK{})));
    Tensor coords = make_tensor(tScS.data(), accumulator_rowcol(tScS.layout()));
    constexpr int kRows = decltype(size<0>(scores))::value;
    const RowWindows<kRows> windows(mask.spec, tile.m_block * kBlockM, coords);
    clear(tOrO);

    const int num_tiles = mask.num_tiles();
    // Ring slot and parity of this work tile's it-th K/V tile.
    auto slot = [&](int it) { return stage_of(pipe_base + it); };
    auto parity = [&](int it) { return phase_of(pipe_base + it); };
    auto wait_k = [&](int it) { ClusterBarrier::wait(&s.k_full[slot(it)], parity(it)); };
    auto wait_v = [&](int it) { ClusterBarrier::wait(&s.v_full[slot(it)], parity(it)); };
    // After the S GEMM of K tile `it` completed: frees its K slot and, after the last one, Q's
    // buffer (when O has its own).
    auto release_k = [&](int it) {
      ClusterBarrier::arrive(&s.k_empty[slot(it)]);
      if (Traits::kSeparateO && it == num_tiles - 1) ClusterBarrier::arrive(&s.q_empty);
    };
    auto release_v = [&](int it) { ClusterBarrier::arrive(&s.v_empty[slot(it)]); };
    // Turns: a warpgroup waits on its own barrier before issuing, and after issuing lets the next
    // one (in a ring) go. The last warpgroup opens the first round for warpgroup 0 and skips the
    // hand-over after its last issue, so every barrier phase gets exactly 128 + 128 arrivals.
    constexpr int kWarpGroups = Traits::kNumMmaWarpGroups;
    constexpr int kTurnThreads = 2 * Traits::kThreadsPerWarpGroup;  // the waiter and the one passing
    const uint32_t own_barrier = static_cast<uint32_t>(FwdBarrier::kSchedulerWG0) + warp_group;
    const uint32_t next_barrier = static_cast<uint32_t>(FwdBarrier::kSchedulerWG0) + (warp_group + 1) % kWarpGroups;
    auto wait_turn = [&] { NamedBarrier::sync(kTurnThreads, own_barrier); };
    auto pass_turn = [&](bool last_issue) {
      if (warp_group != kWarpGroups - 1 || !last_issue) NamedBarrier::arrive(kTurnThreads, next_barrier);
    };
    auto mask_tile = [&](int it) {
      const int n_block = mask.n_max - 1 - it;
      if (mask.needs_mask(n_block)) windows.apply(scores, coords, n_block * kBlockN);
    };

    if (warp_group == kWarpGroups - 1) NamedBarrier::arrive(kTurnThreads, next_barrier);
    ClusterBarrier::wait(&s.q_full, static_cast<uint32_t>(q_round & 1));

    float o_scale[kRows];
    wait_k(0);
    wait_turn();
    wgmma_gemm</*kZeroInit=*/true, /*kWaitGroups=*/-1>(mma_qk, tSrQ, tSrK(_, _, _, slot(0)), tSrS);
    pass_turn(num_tiles == 1);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    release_k(0);
    mask_tile(0);
    softmax.template update</*kFirst=*/true>(scores, o_scale);
    convert_fragment(tSrS, tOrP);

    CUTLASS_PRAGMA_NO_UNROLL
    for (int it = 1; it < num_tiles; ++it) {
      wait_k(it);
      wait_turn();
      wgmma_gemm<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, slot(it)), tSrS);
      Softmax::scale_rows(o_rowcol, o_scale);  // O is idle: the previous P V has completed
      wait_v(it - 1);
      wgmma_gemm<false, -1>(mma_pv, tOrP, tOrV(_, _, _, slot(it - 1)), tOrO);
      pass_turn(it == num_tiles - 1);
      warpgroup_wait<1>();  // S(it) done, P(it - 1) V(it - 1) may still run
      warpgroup_fence_operand(tSrS);
      release_k(it);
      mask_tile(it);
      softmax.template update<false>(scores, o_scale);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      release_v(it - 1);
      convert_fragment(tSrS, tOrP);
    }
    Softmax::scale_rows(o_rowcol, o_scale);
    wait_v(num_tiles - 1);
    wgmma_gemm<false, 0>(mma_pv, tOrP, tOrV(_, _, _, slot(num_tiles - 1)), tOrO);
    release_v(num_tiles - 1);
  }
};

}  // namespace flashtrain::cuda::sm90
