// The elementwise stage of the sm90 backward main kernels (bwd_kernel_sm90.h,
// bwd_split_kernel_sm90.h), on a consumer's transposed (keys x queries) accumulator tiles in
// (row = key, column = query) view, coords giving each element's (key, query) inside the step's
// (kBlockN x kBlockM) tile:
//   P^T  = exp2(S^T * scale log2e - lse log2e), keys outside the query row's window set to 0;
//   dS^T = P^T * (dP^T - D).
// The row statistics (lse log2e, D) are the stage's, read from shared memory where they are used
// (each serves kRows elements; holding them in registers would cost 2 * kCols).
#pragma once
#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "../common/fast_math.h"

namespace flashtrain::cuda::sm90 {

// Whether every query row of the tile at (m0, n0) sees every key of it, so that no key needs
// masking (rows past len_q have lse = +inf, so their P is 0 anyway).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool tile_is_interior(const MaskSpec& mask, int m0, int n0, int len_q) {
  const int last_row = (m0 + kBlockM < len_q ? m0 + kBlockM : len_q) - 1;
  return mask.col_begin(last_row) <= n0 && mask.col_end(m0) >= n0 + kBlockN;
}

// S^T -> P^T in place.
template <class Scores, class Coords>
__device__ __forceinline__ void probabilities_t(Scores& scores, const Coords& coords, const float* lse_log2,
                                                float scale_log2, const MaskSpec& mask, bool interior, int m0,
                                                int n0, int len_q) {
  using namespace cute;
  constexpr int kRows = decltype(size<0>(scores))::value;
  constexpr int kCols = decltype(size<1>(scores))::value;
  if (interior) {
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const float lse2 = lse_log2[get<1>(coords(0, c))];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) scores(r, c) = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
    }
  } else {
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const float lse2 = lse_log2[get<1>(coords(0, c))];
      const int i = m0 + get<1>(coords(0, c));
      const int begin = static_cast<int>(mask.col_begin(i)) - n0;
      const int end = (i < len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int j = get<0>(coords(r, 0));
        const float prob = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
        scores(r, c) = (j >= begin && j < end) ? prob : 0.0f;
      }
    }
  }
}

// dP^T -> dS^T in place, from P^T.
template <class Dp, class Probs, class Coords>
__device__ __forceinline__ void dscores_t(Dp& dp, const Probs& probs, const Coords& coords, const float* dsum) {
  using namespace cute;
  constexpr int kRows = decltype(size<0>(dp))::value;
  constexpr int kCols = decltype(size<1>(dp))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int c = 0; c < kCols; ++c) {
    const float d = dsum[get<1>(coords(0, c))];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) dp(r, c) = probs(r, c) * (dp(r, c) - d);
  }
}

}  // namespace flashtrain::cuda::sm90
