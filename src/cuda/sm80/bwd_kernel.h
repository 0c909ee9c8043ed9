// Backward stage 2, the main kernel (FlashAttention-2 style, mma.sync + cp.async + ldmatrix).
//
// One block owns one KV tile (kBlockN key rows) of one batch and one KV head, and a chunk of that
// head's query-head group (the whole group unless bwd_plan split it). It keeps dK and dV of its
// tile in fp32 registers and walks the Q tiles (query head by query head) that can see the tile:
//   S  = scale * Q K^T -> softcap -> ALiBi -> mask          (src/common/mask.h)
//   P  = exp2(S * log2e - lse * log2e)                       (0 for rows that see no key;
//                                                            safe pass: - lse_fix, a unit row sum)
//   Pd = P * keep / (1 - p)                                  (keep: the philox bits of philox.h)
//   dV += Pd^T dO,  dP = dO V^T,  dS = P * (dP * keep / (1 - p) - D)
//   dS *= 1 - tanh^2                                         (softcap chain rule)
//   dK += dS^T Q,   dQ_accum += scale * dS K                 (fp32 atomics, bwd_epilogue.h)
// and finally writes dK (times scale) and dV (bwd_epilogue.h), raising the overflow guard's flag
// when a stored value is non-finite. The safe pass (kPass = BwdPass::kSafe) runs only when that
// flag is set (or as the only pass, for Precision::kHigh); it rescales dS by powers of two so it
// fits the input dtype and runs the P / dS GEMMs on hi + lo halves (bwd_safe_scale.h).
// With telemetry on, each pass folds max |dS| (fp32, before any scaling) into the guard's words.
#pragma once
#include <cuda_runtime.h>
#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "../common/dropout.h"
#include "../common/fast_math.h"
#include "../common/fragment.h"
#include "../common/gated_grid.h"
#include "../common/gemm.h"
#include "../common/gmem_copy.h"
#include "../common/mask_tile.h"
#include "bwd_epilogue.h"
#include "bwd_kernel_traits.h"
#include "bwd_params.h"
#include "bwd_row_stats.h"
#include "bwd_score.h"
#include "bwd_safe_scale.h"
#include "fwd_telemetry.h"

namespace flashtrain::cuda::sm80 {

// One tile of the grid (n_blocks, B, Hk * head_chunks): KV tile n_block of batch b, KV head and
// head chunk z. Traits::kNThreads threads; Traits::kSmemBytes dynamic smem.
template <typename Traits, BwdPass kPass>
__device__ __forceinline__ void bwd_main_tile(const BwdParams& p, const int n_block, const int b, const int z) {
  using namespace cute;
  constexpr bool kSafe = kPass == BwdPass::kSafe;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kDimQK = Traits::kDimQK;
  constexpr int kDimV = Traits::kDimV;
  constexpr int kStages = Traits::kStagesQdO;
  constexpr int kDqChunk = Traits::kDqChunk;

  extern __shared__ __align__(1024) char smem_raw[];
  Element* const smem_q = reinterpret_cast<Element*>(smem_raw);
  Element* const smem_do = smem_q + kStages * Traits::kSizeQ;
  Element* const smem_k = smem_do + kStages * Traits::kSizedO;
  Element* const smem_v = smem_k + Traits::kSizeK;
  Element* const smem_p = smem_v + Traits::kSizeV;
  Element* const smem_ds = smem_p + Traits::kSizePdS;
  // Per stage: lse * log2e of the tile's rows, then D.
  float* const smem_stats = reinterpret_cast<float*>(smem_ds + Traits::kSizePdS);

  const int tid = threadIdx.x;
  const int hk = z / p.head_chunks;
  const int hq_begin = hk * p.group + (z % p.head_chunks) * p.heads_per_chunk;
  const SeqGeometry geo(p, b);
  const int n0 = n_block * kBlockN;
  if (n0 >= geo.len_k) return;  // a shorter sequence of a varlen batch
  const int kv_rows = geo.len_k - n0;

  // The column range is the whole tile (not clipped at len_k) so that first_key_tile() inverts it.
  const TileRange m_tiles = visible_query_tiles(geo.mask(p), n0, n0 + kBlockN, geo.len_q, kBlockM);
  const int m_count = m_tiles.empty() ? 0 : m_tiles.end - m_tiles.begin;
  const int num_steps = m_count * p.heads_per_chunk;

  // ---- shared-memory tiles ---------------------------------------------------------------
  auto smem_tile = [](Element* ptr, auto layout) { return make_tensor(make_smem_ptr(ptr), layout); };
  Tensor sK = smem_tile(smem_k, typename Traits::SmemLayoutK{});
  Tensor sKt = smem_tile(smem_k, typename Traits::SmemLayoutKt{});
  Tensor sV = smem_tile(smem_v, typename Traits::SmemLayoutV{});
  Tensor sP = smem_tile(smem_p, typename Traits::SmemLayoutPdS{});
  Tensor sPt = smem_tile(smem_p, typename Traits::SmemLayoutPdSt{});
  Tensor sdS = smem_tile(smem_ds, typename Traits::SmemLayoutPdS{});
  Tensor sdSt = smem_tile(smem_ds, typename Traits::SmemLayoutPdSt{});
  auto sQ_at = [&](int stage) {
    return smem_tile(smem_q + stage * Traits::kSizeQ, typename Traits::SmemLayoutQ{});
  };
  auto sQt_at = [&](int stage) {
    return smem_tile(smem_q + stage * Traits::kSizeQ, typename Traits::SmemLayoutQt{});
  };
  auto sdO_at = [&](int stage) {
    return smem_tile(smem_do + stage * Traits::kSizedO, typename Traits::SmemLayoutdO{});
  };
  auto sdOt_at = [&](int stage) {
    return smem_tile(smem_do + stage * Traits::kSizedO, typename Traits::SmemLayoutdOt{});
  };

  // ---- global -> shared loads ------------------------------------------------------------
  typename Traits::GmemCopyQK gcopy_qk;
  typename Traits::GmemCopyV gcopy_v;
  auto gthr_qk = gcopy_qk.get_thread_slice(tid);
  auto gthr_v = gcopy_v.get_thread_slice(tid);
  const Tensor cQK_M = gthr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kDimQK>>{}));
  const Tensor cV_M = gthr_v.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kDimV>>{}));

  {
    const Element* k_ptr = static_cast<const Element*>(p.k) + geo.k_offset(p.sk, b, n0, hk);
    const Element* v_ptr = static_cast<const Element*>(p.v) + geo.k_offset(p.sv, b, n0, hk);
    Tensor gK = make_tensor(make_gmem_ptr(k_ptr), Shape<Int<kBlockN>, Int<kDimQK>>{}, make_stride(p.sk.seq, _1{}));
    Tensor gV = make_tensor(make_gmem_ptr(v_ptr), Shape<Int<kBlockN>, Int<kDimV>>{}, make_stride(p.sv.seq, _1{}));
    copy_rows<true>(gcopy_qk, gthr_qk.partition_S(gK), gthr_qk.partition_D(sK),
                    gthr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimQK>>{})), kv_rows);
    copy_rows<true>(gcopy_v, gthr_v.partition_S(gV), gthr_v.partition_D(sV),
                    gthr_v.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimV>>{})), kv_rows);
    cp_async_fence();
  }

  // Step t covers query head hq_begin + t / m_count and step t % m_count of the walk over the Q
  // tiles, which starts on the diagonal under the rotated dQ schedule (tile_range.h).
  const int walk_offset = dq_walk_offset(p.dq_rotated, n_block, m_tiles, kBlockM, kBlockN);
  auto step_m_block = [&](int step) { return dq_walk_tile(m_tiles, walk_offset, step % m_count); };
  auto load_q_tile = [&](int step, int stage) {
    const int hq = hq_begin + step / m_count;
    const int m0 = step_m_block(step) * kBlockM;
    const Element* q_ptr = static_cast<const Element*>(p.q) + geo.q_offset(p.sq, b, m0, hq);
    const Element* do_ptr = static_cast<const Element*>(p.dout) + geo.q_offset(p.sdo, b, m0, hq);
    Tensor gQ = make_tensor(make_gmem_ptr(q_ptr), Shape<Int<kBlockM>, Int<kDimQK>>{}, make_stride(p.sq.seq, _1{}));
    Tensor gdO = make_tensor(make_gmem_ptr(do_ptr), Shape<Int<kBlockM>, Int<kDimV>>{}, make_stride(p.sdo.seq, _1{}));
    copy_rows<true>(gcopy_qk, gthr_qk.partition_S(gQ), gthr_qk.partition_D(sQ_at(stage)), cQK_M, geo.len_q - m0);
    copy_rows<true>(gcopy_v, gthr_v.partition_S(gdO), gthr_v.partition_D(sdO_at(stage)), cV_M, geo.len_q - m0);
    // Row statistics: lse * log2e and D of the tile's rows (bwd_row_stats.h), per stage.
    static_assert(2 * kBlockM <= Traits::kNThreads, "one thread per row statistic");
    float* stats = smem_stats + stage * 2 * kBlockM;
    fetch_row_stats(p, geo, hq, m0, kBlockM, tid, stats, stats + kBlockM);
    cp_async_fence();
  };

  // ---- MMA partitions ----------------------------------------------------------------------
  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);

  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ_at(0));
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);
  Tensor tdPrdO = thr_sdp.partition_fragment_A(sdO_at(0));
  Tensor tdPrV = thr_sdp.partition_fragment_B(sV);
  Tensor tdVrPt = thr_dkv.partition_fragment_A(sPt);
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt_at(0));
  Tensor tdKrdSt = thr_dkv.partition_fragment_A(sdSt);
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt_at(0));
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);
  Tensor tdQrKt = thr_dq.partition_fragment_B(local_tile(sKt, Shape<Int<kDqChunk>, Int<kBlockN>>{}, make_coord(0, 0)));

  auto ldsm_sdp_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_sdp);
  auto ldsm_sdp_b = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, mma_sdp);
  auto ldsm_dkv_a = make_tiled_copy_A(typename Traits::SmemCopyAtomT{}, mma_dkv);
  auto ldsm_dkv_b = make_tiled_copy_B(typename Traits::SmemCopyAtomT{}, mma_dkv);
  auto ldsm_dq_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_dq);
  auto ldsm_dq_b = make_tiled_copy_B(typename Traits::SmemCopyAtomT{}, mma_dq);
  auto ldsm_sdp_a_thr = ldsm_sdp_a.get_thread_slice(tid);
  auto ldsm_sdp_b_thr = ldsm_sdp_b.get_thread_slice(tid);
  auto ldsm_dkv_a_thr = ldsm_dkv_a.get_thread_slice(tid);
  auto ldsm_dkv_b_thr = ldsm_dkv_b.get_thread_slice(tid);
  auto ldsm_dq_a_thr = ldsm_dq_a.get_thread_slice(tid);
  auto ldsm_dq_b_thr = ldsm_dq_b.get_thread_slice(tid);

  auto store_pds = make_tiled_copy_C(typename Traits::SmemStoreAtomPdS{}, mma_sdp);
  auto store_pds_thr = store_pds.get_thread_slice(tid);

  // (row, col) of every S/dP accumulator element inside the (kBlockM x kBlockN) tile.
  const Tensor tScS = rowcol(thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})));
  constexpr int kRows = decltype(size<0>(tScS))::value;
  constexpr int kCols = decltype(size<1>(tScS))::value;
  const DropoutParams dropout{p.seed, p.offset, p.dropout_threshold};

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kDimQK>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kDimV>>{});
  clear(acc_dk);
  clear(acc_dv);
  float ds_max = 0.0f;  // telemetry: this thread's max |dS| (NaN ignored)
  int ds_exponent = 0;  // safe pass: acc_dk and the stored dS tiles are in units of 2^-ds_exponent

  if (num_steps > 0) load_q_tile(0, 0);
  for (int step = 0; step < num_steps; ++step) {
    const int stage = kStages == 2 ? (step & 1) : 0;
    const int hq = hq_begin + step / m_count;
    const int m_block = step_m_block(step);
    const int m0 = m_block * kBlockM;
    if (kStages == 2 && step + 1 < num_steps) {
      load_q_tile(step + 1, stage ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    gemm_ss(acc_s, tSrQ, tSrK, ldsm_sdp_a_thr.partition_S(sQ_at(stage)), ldsm_sdp_b_thr.partition_S(sK), mma_sdp,
            ldsm_sdp_a, ldsm_sdp_b);
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_dp);
    gemm_ss(acc_dp, tdPrdO, tdPrV, ldsm_sdp_a_thr.partition_S(sdO_at(stage)), ldsm_sdp_b_thr.partition_S(sV),
            mma_sdp, ldsm_sdp_a, ldsm_sdp_b);

    // acc_s: S -> P (then P * keep), acc_dp: dP -> dS.
    {
      Tensor s = rowcol(acc_s);
      Tensor dp = rowcol(acc_dp);
      const uint32_t bh = static_cast<uint32_t>(b * p.heads_q + hq);
      if (p.dropout) apply_dropout(dp, tScS, dropout, bh, m0, n0);  // dL/dP of a dropped element is 0
      const float slope_log2 =
          p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + hq] * kLog2e : 0.0f;
      const float* lse2 = smem_stats + stage * 2 * kBlockM;
      const float* dsum = lse2 + kBlockM;
      const MaskSpec mask = geo.mask(p);
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = get<0>(tScS(r, 0));
        const int i = m0 + row;
        // Visible columns of row i, relative to n0 (rows past the sequence see none). Both fit
        // in int: they are clamped to [0, len_k].
        const int col_begin = static_cast<int>(mask.col_begin(i)) - n0;
        const int col_end = (i < geo.len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
        const int diag_i = i + geo.diag - n0;  // the diagonal column, relative to n0
        // The safe pass normalises its P rows to a unit sum (lse_fix, bwd_exact_dsum.h): applied
        // after the subtraction of lse, where the exponent is small and the rounding fine.
        const float fix =
            kSafe && i < geo.len_q ? p.lse_fix[static_cast<int64_t>(hq) * p.total_q + geo.row_q + i] : 0.0f;
        CUTE_UNROLL
        for (int c = 0; c < kCols; ++c) {
          const int j = get<1>(tScS(r, c));
          const ScoreLog2 x = bwd_score_log2(p, s(r, c), lse2[row], slope_log2, diag_i, j);
          float e = x.exponent;
          if constexpr (kSafe) e -= fix;
          const float prob = (j >= col_begin && j < col_end) ? fast_exp2(e) : 0.0f;
          dp(r, c) = prob * (dp(r, c) * p.dropout_rescale - dsum[row]) * x.dtanh;
          s(r, c) = prob;
        }
      }
      // dV accumulates P * keep; its 1 / (1 - p) is applied once in store_dkv.
      if (p.dropout) apply_dropout(s, tScS, dropout, bh, m0, n0);
      if (p.telemetry) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dp); ++i) ds_max = fmaxf(ds_max, fabsf(acc_dp(i)));
      }
      if constexpr (kSafe) {
        // The row statistics of this stage were read above; their lse slots are the scratch.
        const int e = safe_ds_exponent<Traits::kNThreads / 32>(acc_dp, smem_stats + stage * 2 * kBlockM);
        if (e > ds_exponent) {
          const float rescale = exact_pow2(ds_exponent - e);
          CUTE_UNROLL
          for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= rescale;
          ds_exponent = e;
        }
        const float down = exact_pow2(-ds_exponent);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dp); ++i) acc_dp(i) *= down;
      }
    }

    // P and dS go through shared memory in the input dtype: dV += P^T dO, dQ += dS K, dK += dS^T Q.
    const auto p_hi = convert_fragment<Element>(acc_s);
    cute::copy(store_pds, store_pds_thr.retile_S(p_hi), store_pds_thr.partition_D(sP));
    const auto ds_hi = convert_fragment<Element>(acc_dp);
    cute::copy(store_pds, store_pds_thr.retile_S(ds_hi), store_pds_thr.partition_D(sdS));
    __syncthreads();

    if constexpr (kSafe) {
      // The split (bwd_safe_scale.h): the high halves are in sP / sdS; the low halves, made now so
      // that only they stay in registers, go through sP once the GEMMs reading it are done. dS's
      // low half stays in sP for the dQ GEMMs below, which add both halves of a chunk before its
      // one atomic add (and its one deterministic turn). (The normal pass spells its GEMM calls
      // out: routing them through lambdas changes its generated code.)
      const auto p_lo = split_low_half<Element>(acc_s, p_hi);
      const auto ds_lo = split_low_half<Element>(acc_dp, ds_hi);
      auto gemm_dv = [&]() {  // from sP
        gemm_ss(acc_dv, tdVrPt, tdVrdOt, ldsm_dkv_a_thr.partition_S(sPt), ldsm_dkv_b_thr.partition_S(sdOt_at(stage)),
                mma_dkv, ldsm_dkv_a, ldsm_dkv_b);
      };
      auto gemm_dk = [&](auto& ds_t) {  // ds_t: a dS tile, transposed view
        gemm_ss(acc_dk, tdKrdSt, tdKrQt, ldsm_dkv_a_thr.partition_S(ds_t), ldsm_dkv_b_thr.partition_S(sQt_at(stage)),
                mma_dkv, ldsm_dkv_a, ldsm_dkv_b);
      };
      gemm_dv();
      __syncthreads();  // every warp is done with P's high half
      cute::copy(store_pds, store_pds_thr.retile_S(p_lo), store_pds_thr.partition_D(sP));
      __syncthreads();
      gemm_dv();
      gemm_dk(sdSt);
      __syncthreads();  // ... and with P's low half
      cute::copy(store_pds, store_pds_thr.retile_S(ds_lo), store_pds_thr.partition_D(sP));
      __syncthreads();
      gemm_dk(sPt);
    } else {
      gemm_ss(acc_dv, tdVrPt, tdVrdOt, ldsm_dkv_a_thr.partition_S(sPt), ldsm_dkv_b_thr.partition_S(sdOt_at(stage)),
              mma_dkv, ldsm_dkv_a, ldsm_dkv_b);
    }
    {
      int* sema = p.deterministic ? dq_semaphore(p, b, hq, m_block) : nullptr;
      if (p.deterministic)
        wait_dq_turn(sema, dq_turn(geo.mask(p), p.dq_rotated, n_block, m0, min(m0 + kBlockM, geo.len_q), kBlockN));
      CUTE_UNROLL
      for (int chunk = 0; chunk < kDimQK / kDqChunk; ++chunk) {
        Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kDqChunk>>{});
        clear(acc_dq);
        auto tdQsKt =
            ldsm_dq_b_thr.partition_S(local_tile(sKt, Shape<Int<kDqChunk>, Int<kBlockN>>{}, make_coord(chunk, 0)));
        gemm_ss(acc_dq, tdQrdS, tdQrKt, ldsm_dq_a_thr.partition_S(sdS), tdQsKt, mma_dq, ldsm_dq_a, ldsm_dq_b);
        if constexpr (kSafe) {  // dS's low half
          gemm_ss(acc_dq, tdQrdS, tdQrKt, ldsm_dq_a_thr.partition_S(sP), tdQsKt, mma_dq, ldsm_dq_a, ldsm_dq_b);
        }
        accumulate_dq<Traits>(p, geo, thr_dq, acc_dq, hq, m0, chunk * kDqChunk,
                              kSafe ? exact_pow2(ds_exponent) : 1.0f);
      }
      if (p.deterministic) pass_dq_turn(sema);
    }
    if constexpr (!kSafe) {
      gemm_ss(acc_dk, tdKrdSt, tdKrQt, ldsm_dkv_a_thr.partition_S(sdSt), ldsm_dkv_b_thr.partition_S(sQt_at(stage)),
              mma_dkv, ldsm_dkv_a, ldsm_dkv_b);
    }
    __syncthreads();  // the next step overwrites sP, sdS and (single stage) sQ / sdO
    if (kStages == 1 && step + 1 < num_steps) load_q_tile(step + 1, 0);
  }
  cp_async_wait<0>();  // K/V loads of a tile no Q tile reaches are still in flight

  if (p.telemetry) telemetry_warp_max(&p.numerics->max_abs_ds, ds_max);
  store_dkv<Traits>(p, geo, thr_dkv, acc_dk, acc_dv, b, hk, n0, kv_rows, kSafe ? exact_pow2(ds_exponent) : 1.0f,
                    kSafe ? nullptr : &p.numerics->nonfinite);
}

// The normal pass: one block per tile of `tiles` (its launch grid). The safe pass: one wave of
// blocks walking every tile (gated_grid.h), and nothing unless the normal pass raised the flag
// (or Precision::kHigh's launcher did).
template <typename Traits, BwdPass kPass>
__global__ void __launch_bounds__(Traits::kNThreads, 1) bwd_main_kernel(const BwdParams p, const TileGrid tiles) {
  if constexpr (kPass == BwdPass::kSafe) {
    if (p.numerics->nonfinite == 0) return;
    for_each_tile(tiles, [&](int x, int y, int z) { bwd_main_tile<Traits, kPass>(p, x, y, z); });
  } else {
    bwd_main_tile<Traits, kPass>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  }
}

}  // namespace flashtrain::cuda::sm80
