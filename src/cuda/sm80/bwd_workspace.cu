// Grid split and workspace layout of the sm80 backward (layout documented in bwd_plan.h).
#include "bwd_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>


namespace flashtrain::cuda::sm80 {
namespace {

// Blocks per SM the grid should reach before query heads of a group are split over blocks.
// Splitting costs fp32 atomics on dK/dV and a postprocess pass, so it is only worth it when
// the plain grid leaves SMs idle.
constexpr int kTargetBlocksPerSm = 2;
// Row statistics per (row, query head): lse_log2, dsum, lse_fix, do_scale (bwd_plan.h).
constexpr std::size_t kRowStats = 4;

std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

int sm_count(int device_index) {
  int count = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index);
  FT_CHECK(err == cudaSuccess, "cuda backward: cannot read the SM count of device ", device_index,
           ": ", cudaGetErrorString(err));
  return count;
}

// Smallest divisor of group that brings blocks * chunks up to target (group when none does).
int choose_head_chunks(int64_t blocks_per_chunk, int64_t group, int64_t target) {
  for (int64_t chunks = 1; chunks < group; ++chunks) {
    if (group % chunks == 0 && blocks_per_chunk * chunks >= target) return static_cast<int>(chunks);
  }
  return static_cast<int>(group);
}

// True when t's elements tile one block of memory exactly (some order of its dims is row-major).
bool dense_block(const TensorView& t) {
  int dims[TensorView::kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] > 1) dims[n++] = d;  // a dim of size 1 may have any stride
  std::sort(dims, dims + n, [&t](int a, int b) { return t.stride[a] < t.stride[b]; });
  int64_t expected = 1;
  for (int i = 0; i < n; ++i) {
    if (t.stride[dims[i]] != expected) return false;
    expected *= t.shape[dims[i]];
  }
  return true;
}

}  // namespace

BwdPlan make_bwd_plan(const Problem& p) {
  BwdPlan plan;
  const BwdTileShape tile = bwd_tile_shape(static_cast<int>(p.dim_qk));
  plan.block_m = tile.block_m;
  plan.block_n = tile.block_n;
  plan.m_blocks = ceil_div(p.max_seqlen_q, plan.block_m);
  plan.n_blocks = ceil_div(p.max_seqlen_k, plan.block_n);

  // Deterministic mode keeps a KV head's whole query group in one block so dK/dV are summed in
  // registers in a fixed order.
  const int64_t base_blocks = static_cast<int64_t>(plan.n_blocks) * p.batch * p.heads_k;
  plan.head_chunks = p.deterministic ? 1
                                     : choose_head_chunks(base_blocks, p.group(),
                                                          int64_t{kTargetBlocksPerSm} * sm_count(p.device_index));

  plan.dq_accum_elems = static_cast<std::size_t>(p.total_q * p.heads_q * p.dim_qk);
  plan.dq_sema_elems =
      p.deterministic ? static_cast<std::size_t>(p.batch * p.heads_q) * plan.m_blocks : 0;
  if (plan.accumulate_dkv()) {
    plan.dk_accum_elems = static_cast<std::size_t>(p.total_k * p.heads_k * p.dim_qk);
    plan.dv_accum_elems = static_cast<std::size_t>(p.total_k * p.heads_k * p.dim_v);
  }
  const std::size_t row_stats = static_cast<std::size_t>(p.heads_q * p.total_q) * sizeof(float);

  std::size_t offset = 0;
  auto take = [&offset](std::size_t bytes) {
    const std::size_t at = offset;
    offset += align_up(bytes);
    return at;
  };
  // The row statistics (lse * log2e, D, lse's fix, dO's scale) live in dq's own memory when it is one dense, 16-byte
  // aligned block with room for them: only the postprocess writes dq, after the last reader of the
  // statistics (and the safe pass recomputes them). The workspace then holds just the fp32
  // accumulators, which keeps the extra memory of a backward at cuDNN's.
  const std::size_t dq_bytes = static_cast<std::size_t>(p.dq.numel()) * dtype_size(p.dq.dtype);
  plan.stats_in_dq = p.dq.defined() && dense_block(p.dq) && reinterpret_cast<std::uintptr_t>(p.dq.data) % 16 == 0 &&
                     dq_bytes >= kRowStats * row_stats;
  if (!plan.stats_in_dq) {
    plan.lse_log2 = take(row_stats);
    plan.dsum = take(row_stats);
    plan.lse_fix = take(row_stats);
    plan.do_scale = take(row_stats);
  }
  plan.dq_accum = take(plan.dq_accum_elems * sizeof(float));
  plan.dq_sema = take(plan.dq_sema_elems * sizeof(int));
  plan.dk_accum = take(plan.dk_accum_elems * sizeof(float));
  plan.dv_accum = take(plan.dv_accum_elems * sizeof(float));
  plan.numerics = take(sizeof(BwdNumericsWords));
  plan.total_bytes = offset;
  return plan;
}

std::size_t bwd_workspace_bytes(const Problem& p) { return make_bwd_plan(p).total_bytes; }

}  // namespace flashtrain::cuda::sm80
