// Host-side plan of the sm80 backward: tile shape per head dim, grid split and workspace layout.
// Light header (no CuTe): included by the launch template and by dispatch code that only needs
// bwd_workspace_bytes().
//
// Workspace layout (one allocation, every segment starts on a kWorkspaceAlign boundary; rows are
// "global q rows": dense b * Sq + i, varlen cu_seqlens_q[b] + i, so no per-batch padding is
// needed: every kernel predicates rows against the batch's own length):
//   lse_log2  float [Hq][total_q]            lse * log2(e); +inf where lse = -inf (row sees no key),
//                                            so exp2(s * log2e - lse_log2) = 0 without a NaN
//   dsum      float [Hq][total_q]            D = rowsum(dO * O)
//   lse_fix   float [Hq][total_q]            log2 of the row sum of the P that the safe pass
//                                            recomputes, written by its exact-D pass
//                                            (bwd_exact_dsum.h); the safe main kernel subtracts it
//                                            so those rows sum to 1
//   do_scale  float [Hq][total_q]            2^-b with max_k |dO_ik| < 2^b (1 for a zero row): the
//                                            row's part of the sm90 bf16 kernel's fp16 dS scale
//                                            (src/cuda/sm90/bwd_ds_scale_sm90.h)
//             (all four in dq's own memory instead when BwdPlan::stats_in_dq)
//   dq_accum  float [total_q][Hq][Dqk]       fp32 dQ, scaled by softmax_scale, zeroed by preprocess;
//                                            the sm90 D 64 / 128 kernel's columns in the staged order
//                                            (src/cuda/common/dq_column_order.h)
//   dq_sema   int   [B][Hq][m_blocks]        deterministic only: how many KV tiles have added into
//                                            each dQ tile; fixes the order of the fp32 additions
//   dk_accum  float [total_k][Hk][Dqk]       head_chunks > 1 only: query heads of one KV head are
//   dv_accum  float [total_k][Hk][Dv]        split over blocks that add their dK/dV with atomics
//   numerics  BwdNumericsWords               the overflow guard's device words (below), zeroed by
//                                            the preprocess of every call
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../api/problem.h"

namespace flashtrain::cuda::sm80 {

constexpr std::size_t kWorkspaceAlign = 256;

// Device words of the overflow guard and backward telemetry (DESIGN.md §3), one per call:
//   nonfinite   NumericsFlag bits (src/cuda/common/numerics_flags.h): raised by the normal pass
//               when a gradient it stores (dQ, dK, dV in the output dtype) is non-finite; the
//               safe pass reads it and runs only when it is set
//   safe_reruns 1 when the safe pass ran (it counts itself), copied to NumericsReport only when
//               a report was asked for
//   max_abs_ds  max |dS| of the normal pass as an order-preserving int (fwd_telemetry.h), written
//               only when a report was asked for
struct BwdNumericsWords {
  uint32_t nonfinite;
  uint32_t safe_reruns;
  int max_abs_ds;
  uint32_t reserved;
};

// Which of the two passes a launch belongs to. The safe pass is always enqueued after the normal
// one; its kernels read BwdNumericsWords::nonfinite first and exit at once when it is clear, so
// the guard never synchronises with the host.
enum class BwdPass : int {
  kNormal = 0,
  kSafe = 1,  // recompute with dS rescaled by exact powers of two (bwd_kernel.h)
};

// Tile of one backward block: kBlockM query rows per inner step, kBlockN key rows per block.
// Head dims above 128 use 64-row KV tiles: the dK and dV accumulators (kBlockN x D fp32 each)
// live in registers for the block's whole life, and Q, dO, K, V tiles must fit sm80's 163 KB of
// shared memory.
struct BwdTileShape {
  int block_m;
  int block_n;
};
constexpr BwdTileShape bwd_tile_shape(int dim_qk) {
  return dim_qk <= 128 ? BwdTileShape{64, 128} : BwdTileShape{64, 64};
}

struct BwdPlan {
  int block_m = 0, block_n = 0;
  int m_blocks = 0;     // Q tiles of the longest query sequence
  int n_blocks = 0;     // KV tiles of the longest key sequence (grid.x)
  int head_chunks = 1;  // blocks sharing one KV head's query-head group (grid.z = Hk * chunks)
  bool stats_in_dq = false;  // the row statistics at the start of dq's memory, not in the workspace
  std::size_t lse_log2 = 0, dsum = 0, lse_fix = 0, do_scale = 0, dq_accum = 0, dq_sema = 0, dk_accum = 0, dv_accum = 0, numerics = 0;
  std::size_t dq_accum_elems = 0, dk_accum_elems = 0, dv_accum_elems = 0, dq_sema_elems = 0;
  std::size_t total_bytes = 0;

  bool accumulate_dkv() const { return head_chunks > 1; }
};

// Grid and workspace of p's backward (reads the device's SM count to size the head split).
BwdPlan make_bwd_plan(const Problem& p);
// What sm80::bwd_workspace_size returns.
std::size_t bwd_workspace_bytes(const Problem& p);

}  // namespace flashtrain::cuda::sm80
