// Forward kernel (FlashAttention-2 schedule on mma.sync): one block per (query tile, query head,
// batch). The Q tile stays in shared memory; K and V tiles stream through shared memory with
// cp.async, V(n) loading under QK^T(n) and K(n-1) loading under softmax + PV(n). Key tiles run
// from the last visible one down to the first, so the (masked) diagonal and sequence-end tiles
// come first and the unmasked bulk after them; tiles nobody can see are never loaded.
#pragma once
#include <cute/tensor.hpp>

#include "../common/dropout.h"
#include "../common/fragment.h"
#include "../common/gemm.h"
#include "../common/gmem_copy.h"
#include "../common/kernel_traits.h"
#include "../common/mask_tile.h"
#include "../common/softmax.h"
#include "fwd_epilogue.h"
#include "fwd_params.h"
#include "fwd_telemetry.h"

namespace flashtrain::cuda::sm80 {

// kFeatures: the kernel can apply dropout and the softcap / ALiBi transform (each still switched
// by p at run time). The plain variant leaves both out: their code raises register pressure
// enough to spill at the plain variant's 4 warps.
template <typename Traits, bool kFeatures>
__global__ void __launch_bounds__(Traits::kThreads) fwd_kernel(const __grid_constant__ FwdParams p) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kDimQK = Traits::kDimQK;
  constexpr int kDimV = Traits::kDimV;
  extern __shared__ __align__(128) char smem[];

  // Reversed so that, under a causal mask, the tiles with the most keys start first.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const FwdSeq seq(p, b);
  const int row0 = m_block * kBlockM;
  if (row0 >= seq.len_q) return;
  const int rows = min(kBlockM, seq.len_q - row0);
  const int kh = h / p.group;
  const int tid = threadIdx.x;
  const TileRange tiles = visible_key_tiles(seq.mask(p), row0, row0 + rows, kBlockN);
  // Key columns [full_begin, full_end) are visible to every row of the tile: key tiles inside
  // them skip the per-element mask.
  const int full_begin = static_cast<int>(seq.mask(p).col_begin(row0 + rows - 1));
  const int full_end = static_cast<int>(seq.mask(p).col_end(row0));

  // ---- global tiles -------------------------------------------------------------------------
  const Element* q_ptr = static_cast<const Element*>(p.q) + b * p.sq.batch + (seq.start_q + row0) * p.sq.seq +
                         h * p.sq.head;
  const Element* k_ptr = static_cast<const Element*>(p.k) + b * p.sk.batch + seq.start_k * p.sk.seq + kh * p.sk.head;
  const Element* v_ptr = static_cast<const Element*>(p.v) + b * p.sv.batch + seq.start_k * p.sv.seq + kh * p.sv.head;
  Element* o_ptr = static_cast<Element*>(p.out) + b * p.so.batch + (seq.start_q + row0) * p.so.seq + h * p.so.head;
  float* lse_ptr = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + (seq.start_q + row0) * p.lse_row_stride;

  Tensor gQ = make_tensor(make_gmem_ptr(q_ptr), Shape<Int<kBlockM>, Int<kDimQK>>{}, make_stride(p.sq.seq, _1{}));
  Tensor gO = make_tensor(make_gmem_ptr(o_ptr), Shape<Int<kBlockM>, Int<kDimV>>{}, make_stride(p.so.seq, _1{}));
  // (kBlockN, D, n): key tile n is gK(_, _, n)
  Tensor gK = local_tile(make_tensor(make_gmem_ptr(k_ptr), make_shape(seq.len_k, Int<kDimQK>{}), make_stride(p.sk.seq, _1{})),
                         Shape<Int<kBlockN>, Int<kDimQK>>{}, make_coord(_, 0));
  Tensor gV = local_tile(make_tensor(make_gmem_ptr(v_ptr), make_shape(seq.len_k, Int<kDimV>{}), make_stride(p.sv.seq, _1{})),
                         Shape<Int<kBlockN>, Int<kDimV>>{}, make_coord(_, 0));

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kDimV>>{});
  clear(acc_o);
  Tensor acc_o_rc = rowcol(acc_o);
  constexpr int kRows = decltype(size<0>(acc_o_rc))::value;
  float lse[kRows];

  if (tiles.empty()) {  // every row of the tile is fully masked: out = 0, lse = -inf
#pragma unroll
    for (int r = 0; r < kRows; ++r) lse[r] = -INFINITY;
    fwd_epilogue<Traits>(acc_o, lse, smem, gO, lse_ptr, p.lse_row_stride, rows);
    return;
  }

  // ---- shared tiles and their partitions ----------------------------------------------------
  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemQ{});
  Tensor sK = make_tensor(sQ.data() + cosize(typename Traits::SmemQ{}), typename Traits::SmemK{});
  Tensor sV = make_tensor(sK.data() + cosize(typename Traits::SmemK{}), typename Traits::SmemV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemVt{});

  typename Traits::CopyQK::Load load_qk;
  typename Traits::CopyV::Load load_v;
  auto thr_qk = load_qk.get_thread_slice(tid);
  auto thr_v = load_v.get_thread_slice(tid);
  Tensor tQgQ = thr_qk.partition_S(gQ);
  Tensor tQsQ = thr_qk.partition_D(sQ);
  Tensor tQcQ = thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kDimQK>>{}));
  Tensor tKgK = thr_qk.partition_S(gK);
  Tensor tKsK = thr_qk.partition_D(sK);
  Tensor tKcK = thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimQK>>{}));
  Tensor tVgV = thr_v.partition_S(gV);
  Tensor tVsV = thr_v.partition_D(sV);
  Tensor tVcV = thr_v.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kDimV>>{}));

  Tensor rQ = thr_mma.partition_fragment_A(sQ);
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rVt = thr_mma.partition_fragment_B(sVt);
  auto ld_q = make_tiled_copy_A(SmemLoadAtom<Element>{}, mma);
  auto ld_k = make_tiled_copy_B(SmemLoadAtom<Element>{}, mma);
  auto ld_vt = make_tiled_copy_B(SmemLoadTransposedAtom<Element>{}, mma);
  Tensor sQ_ld = ld_q.get_thread_slice(tid).partition_S(sQ);
  Tensor sK_ld = ld_k.get_thread_slice(tid).partition_S(sK);
  Tensor sVt_ld = ld_vt.get_thread_slice(tid).partition_S(sVt);

  // (row, col) inside the score tile of each accumulator element, in rowcol order
  Tensor coord_s = rowcol(thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})));

  const float scale_log2 = kFeatures && p.transform ? kLog2e : p.scale_log2;
  const auto valid_keys = [&](int n) { return seq.len_k - n * kBlockN; };

  // ---- prologue: Q and the last visible K and V tiles ---------------------------------------
  // Only the sequence's last key tile can be partial, and it can only be the first one visited:
  // the prologue's loads are row-guarded, the main loop's are not.
  copy_rows<true>(load_qk, tQgQ, tQsQ, tQcQ, rows);
  copy_rows<true>(load_qk, tKgK(_, _, _, tiles.end - 1), tKsK, tKcK, valid_keys(tiles.end - 1));
  cp_async_fence();
  copy_rows<true>(load_v, tVgV(_, _, _, tiles.end - 1), tVsV, tVcV, valid_keys(tiles.end - 1));
  cp_async_fence();

  OnlineSoftmax<kRows> softmax;
  softmax.init();
  float logit_max = 0.0f;  // telemetry only
  for (int n = tiles.end - 1; n >= tiles.begin; --n) {
    const int col0 = n * kBlockN;
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    if (n == tiles.end - 1) {
      cp_async_wait<1>();  // Q and K(n); V(n) may still be in flight
      __syncthreads();
    } else {
      cp_async_wait<0>();
      __syncthreads();  // K(n) landed; every warp is done with V(n+1)
      copy(load_v, tVgV(_, _, _, n), tVsV);
      cp_async_fence();
    }

    gemm_ss(acc_s, rQ, rK, sQ_ld, sK_ld, mma, ld_q, ld_k);
    Tensor s = rowcol(acc_s);
    if (kFeatures && p.transform) transform_scores(s, coord_s, p.scale, p.softcap, alibi_slope(p, b, h), seq.diag, row0, col0);
    if (col0 < full_begin || col0 + kBlockN > full_end) mask_scores(s, coord_s, seq.mask(p), row0, col0);
    if (p.telemetry != nullptr)
      logit_max = fmaxf(logit_max, finite_abs_max(s) * (kFeatures && p.transform ? 1.0f : p.scale));

    cp_async_wait<0>();
    __syncthreads();  // V(n) landed; every warp is done with K(n)
    if (n > tiles.begin) {
      copy(load_qk, tKgK(_, _, _, n - 1), tKsK);
      cp_async_fence();
    }

    // One code path for every tile (no peeled first tile): a second inlined copy of the update
    // raised register pressure enough to spill.
    softmax.update(s, acc_o_rc, scale_log2);
    if (kFeatures && p.dropout.threshold > 0) apply_dropout(s, coord_s, p.dropout, b * p.heads_q + h, row0, col0);

    Tensor rP = convert_fragment<Element>(acc_s);
    Tensor rP_a = make_tensor(rP.data(), acc_as_a_layout(rP.layout()));
    gemm_rs(acc_o, rP_a, rVt, sVt_ld, mma, ld_vt);
  }

  if (p.telemetry != nullptr) telemetry_warp_max(&p.telemetry->max_abs_logit, logit_max);
  softmax.finalize(acc_o_rc, scale_log2, kFeatures ? p.out_scale : 1.0f, lse);
  fwd_epilogue<Traits>(acc_o, lse, smem, gO, lse_ptr, p.lse_row_stride, rows);
}

}  // namespace flashtrain::cuda::sm80
