// The row statistics a backward step needs for its Q tile, fetched into shared memory with
// cp.async by the first 2 * block_m threads: thread r < block_m fetches lse * log2e of row r,
// thread block_m + r fetches D of row r (both from the preprocess's workspace). Rows past the
// sequence get lse = +inf (so P = 0) and D = 0. For the sm80 main kernel (the sm90 one fetches its
// statistics in its producer warpgroup, bwd_producer_sm90.h); the
// caller commits the cp.async group.
#pragma once
#include <cmath>
#include <cstdint>

#include <cute/arch/copy_sm80.hpp>

#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

__device__ __forceinline__ void fetch_row_stats(const BwdParams& p, const SeqGeometry& geo, int hq, int m0,
                                                int block_m, int tid, float* lse_log2, float* dsum) {
  if (tid >= 2 * block_m) return;
  const bool is_lse = tid < block_m;
  const int row = is_lse ? tid : tid - block_m;
  float* dst = is_lse ? &lse_log2[row] : &dsum[row];
  if (m0 + row < geo.len_q) {
    const float* src = (is_lse ? p.lse_log2 : p.dsum) + static_cast<int64_t>(hq) * p.total_q + geo.row_q + m0 + row;
    cute::SM80_CP_ASYNC_CACHEALWAYS<float>::copy(*src, *dst);
  } else {
    *dst = is_lse ? INFINITY : 0.0f;
  }
}

}  // namespace flashtrain::cuda::sm80
