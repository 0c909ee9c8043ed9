// Backward stage 1b: D_i = sum_j P_ij dL/dP_ij recomputed from q, k, v, dO and lse, replacing the
// D = rowsum(dO * O) the preprocess wrote. That one uses `out`, which is rounded to the input
// dtype: with a large dO its rounding dominates the dQ / dK error (issue #5's case: ~1e4 of error
// in a dK of 6.5e4 from fp16 `out`). Precision::kHigh runs it always, the guard's safe pass only
// after the normal pass raised the flag.
//
// A forward-shaped kernel on mma.sync: one block per (64-row query tile, query head, batch) keeps
// its Q and dO tiles in shared memory and streams the visible K and V tiles, computing S = Q K^T
// and dP = dO V^T with fp32 accumulation, the probabilities exactly as the main kernel does (same
// lse * log2e from the preprocess, bwd_score.h, same mask), and per row fp32 sums over its own
// keys in a fixed order: deterministic, no atomics. D and the main kernel's P are normalised by
// the row sum of those P (safe_row_stats). Two of the backward's five GEMMs, so it costs about a
// forward pass rather than the O(Sq * Sk * D) memory traffic of a per-row walk.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "../common/cuda_check.h"
#include "../common/dropout.h"
#include "../common/fast_math.h"
#include "../common/fragment.h"
#include "../common/gated_grid.h"
#include "../common/gemm.h"
#include "../common/gmem_copy.h"
#include "../common/kernel_traits.h"
#include "../common/tile_range.h"
#include "bwd_params.h"
#include "bwd_score.h"

namespace flashtrain::cuda::sm80 {

template <int kDimQK_, int kDimV_, typename Element_>
struct ExactDsumTraits {
  using Element = Element_;
  static constexpr int kDimQK = kDimQK_;
  static constexpr int kDimV = kDimV_;
  static constexpr int kNWarps = 4;  // each owns 16 rows and every key column of the tile
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kBlockM = 16 * kNWarps;
  // Narrow key tiles: both GEMMs hold their whole K and V fragments (all of the head dim) next to
  // two fp32 accumulators; 64 keys at head dim 64 already spill.
  static constexpr int kBlockN = kDimQK <= 64 ? 32 : 16;
  using TiledMma = TiledMmaFor<Element, kNWarps, 1>;
  using SmemLayoutQ = SmemRowMajor<kBlockM, kDimQK>;
  using SmemLayoutdO = SmemRowMajor<kBlockM, kDimV>;
  using SmemLayoutK = SmemRowMajor<kBlockN, kDimQK>;
  using SmemLayoutV = SmemRowMajor<kBlockN, kDimV>;
  using GmemCopyQK = typename GmemCopyFor<Element, kNThreads, kDimQK>::Load;
  using GmemCopyV = typename GmemCopyFor<Element, kNThreads, kDimV>::Load;
  static constexpr int kSizeQ = kBlockM * kDimQK, kSizedO = kBlockM * kDimV;
  static constexpr int kSizeK = kBlockN * kDimQK, kSizeV = kBlockN * kDimV;
  static constexpr int kSmemBytes = (kSizeQ + kSizedO + kSizeK + kSizeV) * static_cast<int>(sizeof(Element));
};

// The row statistics of the safe pass from the 4 lanes of a quad that share a row (each lane
// holds some of its columns): lane l's probability mass m_l = sum P_j over the P the main kernel
// computes from lse, its first visible column's dP as its reference r_l (0 without one) and
// s_l = sum P_j (dP_j - r_l). With m = sum_l m_l,
//   D   = sum_l (m_l / m) r_l + (sum_l s_l) / m  = sum_j (P_j / m) dP_j
//   fix = log2(m)
// The safe main kernel subtracts fix from its exponent, so its P rows sum to 1 like D's weights.
// Why: lse (fp32, rounded at the magnitude of the logits, from the forward's own accumulation of
// q.k) makes exp2(s * log2e - lse * log2e) rows sum to 1 + delta, |delta| ~1e-4..1e-3 at logits
// ~1e3; dS = P (dP - D) cancels to far below D where the softmax is peaked, and dK = sum_i dS_ij
// q_i cancels again with a large q, so delta dominated dQ / dK (float64 simulations of issue #5's
// cases: logits ~1e3 fp16 dQ error 8.7e-4 with an unnormalised D, 3.6e-4 normalised; large dO
// with 1e-5 of lse noise, dK error 2.5e-3 with D alone normalised, 2.6e-4 with P too -- fp32
// attention's is 4.4e-4). The reference: a row with one key gets D = dP exactly (m_l / m = 1 in
// correctly rounded division, s_l = 0), so its dS is exactly 0 as the math says. The butterfly
// adds give every lane the same sums, in a fixed order.
struct SafeRowStats {
  float dsum, fix;
};
__device__ __forceinline__ SafeRowStats safe_row_stats(float mass, float shifted, float ref) {
  float total = mass;
  total += __shfl_xor_sync(0xffffffffu, total, 1);
  total += __shfl_xor_sync(0xffffffffu, total, 2);
  const bool seen = total > 0.0f;  // not: the row sees no key (or every P underflowed), dS = 0
  float d = seen ? __fmul_rn(__fdiv_rn(mass, total), ref) : 0.0f;
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  d += __shfl_xor_sync(0xffffffffu, d, 2);
  float s = shifted;
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  return seen ? SafeRowStats{d + __fdiv_rn(s, total), log2f(total)} : SafeRowStats{0.0f, 0.0f};
}

// One tile of the grid (query tiles, Hq, batch): query tile m_block of head hq, batch b.
template <typename Traits>
__device__ __forceinline__ void bwd_exact_dsum_tile(const BwdParams& p, const int m_block, const int hq, const int b) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kDimQK = Traits::kDimQK;
  constexpr int kDimV = Traits::kDimV;
  extern __shared__ __align__(128) char smem_raw[];

  const int tid = threadIdx.x;
  const SeqGeometry geo(p, b);
  const int m0 = m_block * kBlockM;
  if (m0 >= geo.len_q) return;
  const int hk = hq / p.group;
  const MaskSpec mask = geo.mask(p);
  const int rows = min(kBlockM, geo.len_q - m0);
  const TileRange tiles = visible_key_tiles(mask, m0, m0 + rows, kBlockN);

  Element* const smem_q = reinterpret_cast<Element*>(smem_raw);
  Element* const smem_do = smem_q + Traits::kSizeQ;
  Element* const smem_k = smem_do + Traits::kSizedO;
  Element* const smem_v = smem_k + Traits::kSizeK;
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutdO{});
  Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutV{});

  typename Traits::GmemCopyQK gcopy_qk;
  typename Traits::GmemCopyV gcopy_v;
  auto gthr_qk = gcopy_qk.get_thread_slice(tid);
  auto gthr_v = gcopy_v.get_thread_slice(tid);
  {
    const Element* q_ptr = static_cast<const Element*>(p.q) + geo.q_offset(p.sq, b, m0, hq);
    const Element* do_ptr = static_cast<const Element*>(p.dout) + geo.q_offset(p.sdo, b, m0, hq);
    Tensor gQ = make_tensor(make_gmem_ptr(q_ptr), Shape<Int<kBlockM>, Int<kDimQK>>{}, make_stride(p.sq.seq, _1{}));
    Tensor gdO = make_tensor(make_gmem_ptr(do_ptr), Shape<Int<kBlockM>, Int<kDimV>>{}, make_stride(p.sdo.seq, _1{}));
    copy_rows<true>(gcopy_qk, gthr_qk.partition_S(gQ), gthr_qk.partition_D(sQ),
                    gthr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kDimQK>>{})), rows);
    copy_rows<true>(gcopy_v, gthr_v.partition_S(gdO), gthr_v.partition_D(sdO),
                    gthr_v.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kDimV>>{})), rows);
  }
  auto load_kv = [&](int n) {
    const int n0 = n * kBlockN;
    const Element* k_ptr = static_cast<const Element*>(p.k) + geo.k_offset(p.sk, b, n0, hk);
    const Element* v_ptr = static_cast<const Element*>(p.v) + geo.k_offset(p.sv, b, n0, hk);
    Tensor gK = make_tensor(make_gmem_ptr(k_ptr), Shape<Int<kBlockN>, Int<kDimQK>>{}, make_stride(p.sk.seq, _1{}));
    Tensor gV = make_tensor(make_gmem_ptr(v_ptr), Shape<Int<kBlockN>, Int<kDimV>>{}, make_stride(p.sv.seq, _1{}));
    copy_rows<true>(gcopy_qk, gthr_qk.partition_S(gK), gthr_qk.partition_D(sK),
                    gthr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimQK>>{})), geo.len_k - n0);
    copy_rows<true>(gcopy_v, gthr_v.partition_S(gV), gthr_v.partition_D(sV),
                    gthr_v.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimV>>{})), geo.len_k - n0);
    cp_async_fence();
  };

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rQ = thr_mma.partition_fragment_A(sQ);
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rdO = thr_mma.partition_fragment_A(sdO);
  Tensor rV = thr_mma.partition_fragment_B(sV);
  auto ld_a = make_tiled_copy_A(SmemLoadAtom<Element>{}, mma);
  auto ld_b = make_tiled_copy_B(SmemLoadAtom<Element>{}, mma);
  auto ld_a_thr = ld_a.get_thread_slice(tid);
  auto ld_b_thr = ld_b.get_thread_slice(tid);
  const Tensor tScS = rowcol(thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})));
  constexpr int kRows = decltype(size<0>(tScS))::value;
  constexpr int kCols = decltype(size<1>(tScS))::value;

  // This thread's rows: lse * log2e (the preprocess's, as the main kernel reads it), and the
  // row sums of safe_row_stats() below over this thread's columns.
  float lse2[kRows], mass[kRows], shifted[kRows], ref[kRows];
  bool have_ref[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int i = m0 + get<0>(tScS(r, 0));
    lse2[r] = i < geo.len_q ? p.lse_log2[static_cast<int64_t>(hq) * p.total_q + geo.row_q + i] : 0.0f;
    mass[r] = shifted[r] = ref[r] = 0.0f;
    have_ref[r] = false;
  }
  const float slope_log2 = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + hq] * kLog2e : 0.0f;
  const DropoutParams dropout{p.seed, p.offset, p.dropout_threshold};
  const uint32_t bh = static_cast<uint32_t>(b * p.heads_q + hq);

  for (int n = tiles.begin; n < tiles.end; ++n) {
    const int n0 = n * kBlockN;
    if (n > tiles.begin) __syncthreads();  // every warp is done with the previous K and V
    load_kv(n);
    cp_async_wait<0>();
    __syncthreads();
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    clear(acc_dp);
    gemm_ss(acc_s, rQ, rK, ld_a_thr.partition_S(sQ), ld_b_thr.partition_S(sK), mma, ld_a, ld_b);
    gemm_ss(acc_dp, rdO, rV, ld_a_thr.partition_S(sdO), ld_b_thr.partition_S(sV), mma, ld_a, ld_b);
    Tensor s = rowcol(acc_s);
    Tensor dp = rowcol(acc_dp);
    if (p.dropout) apply_dropout(dp, tScS, dropout, bh, m0, n0);  // dL/dP of a dropped element is 0
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int i = m0 + get<0>(tScS(r, 0));
      const int col_begin = static_cast<int>(mask.col_begin(i)) - n0;
      const int col_end = (i < geo.len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
      const int diag_i = i + geo.diag - n0;
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const int j = get<1>(tScS(r, c));
        if (j >= col_begin && j < col_end) {
          const float prob = fast_exp2(bwd_score_log2(p, s(r, c), lse2[r], slope_log2, diag_i, j).exponent);
          if (!have_ref[r]) ref[r] = dp(r, c), have_ref[r] = true;
          mass[r] += prob;
          shifted[r] += prob * (dp(r, c) - ref[r]);
        }
      }
    }
  }

  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const SafeRowStats stats = safe_row_stats(mass[r], shifted[r], ref[r]);
    const int i = m0 + get<0>(tScS(r, 0));
    if (tid % 4 == 0 && i < geo.len_q) {
      const int64_t at = static_cast<int64_t>(hq) * p.total_q + geo.row_q + i;
      p.dsum[at] = stats.dsum * p.dropout_rescale;
      p.lse_fix[at] = stats.fix;
    }
  }
}

// kGated = false: one block per tile of `tiles` (the launch grid). kGated = true: the guard's safe
// pass, which returns at once unless the normal pass raised the flag, on one wave of blocks that
// walks every tile (gated_grid.h).
template <typename Traits, bool kGated>
__global__ void __launch_bounds__(Traits::kNThreads)
    bwd_exact_dsum_kernel(const __grid_constant__ BwdParams p, const TileGrid tiles) {
  if constexpr (kGated) {
    if (p.numerics->nonfinite == 0) return;
    for_each_tile(tiles, [&](int x, int y, int z) { bwd_exact_dsum_tile<Traits>(p, x, y, z); });
  } else {
    bwd_exact_dsum_tile<Traits>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  }
}

// kGated = false: precision="high", every row now. kGated = true: after the safe pass's
// preprocess, overwriting its O-based D only when the guard fired (otherwise every block returns
// at its first instruction).
template <typename Element, int kDimQK, int kDimV, bool kGated>
void launch_bwd_exact_dsum(const BwdParams& p, cudaStream_t stream) {
  using Traits = ExactDsumTraits<kDimQK, kDimV, Element>;
  if (p.total_q == 0 || p.heads_q == 0 || p.batch == 0) return;
  const int m_blocks = (p.max_seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  auto kernel = bwd_exact_dsum_kernel<Traits, kGated>;
  if (Traits::kSmemBytes > 48 * 1024) {
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                  "bwd_exact_dsum: raising the shared-memory limit to ", Traits::kSmemBytes, " bytes");
  }
  const TileGrid tiles{m_blocks, p.heads_q, p.batch};
  const dim3 grid = kGated ? dim3(safe_pass_blocks(tiles.count(), kernel, Traits::kNThreads, Traits::kSmemBytes))
                           : tiles.full();
  kernel<<<grid, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p, tiles);
  check_launch("bwd_exact_dsum");
}

}  // namespace flashtrain::cuda::sm80
