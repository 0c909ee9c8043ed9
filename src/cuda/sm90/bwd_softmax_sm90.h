// The elementwise stage of the sm90 backward main kernels (bwd_kernel_sm90.h and
// bwd_split_kernel_sm90.h on transposed (keys x queries) accumulator tiles, bwd_wide_kernel_sm90.h
// on (queries x keys) ones), in (row, column) view, coords giving each element's (row, column)
// inside the step's tile:
//   P^T  = exp2(S^T * scale log2e - lse log2e), keys outside the query row's window set to 0;
//   dS^T = P^T * (dP^T - D).
// The row statistics (lse log2e, D) are the stage's, read from shared memory where they are used
// (each serves kRows elements; holding them in registers would cost 2 * kCols).
#pragma once
#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "../common/fast_math.h"

namespace flashtrain::cuda::sm90 {

// An element of a tile by (query, key) whichever way the accumulator holds them: kKeyRows,
// the transposed (keys x queries) tiles of bwd_kernel_sm90.h / bwd_split_kernel_sm90.h (row = key);
// otherwise the (queries x keys) tiles of bwd_wide_kernel_sm90.h (row = query). Each function walks
// the queries in the outer loop, so that a row statistic is read once per query.
template <bool kKeyRows, class T>
__device__ __forceinline__ decltype(auto) at_query_key(T&& t, int query, int key) {
  if constexpr (kKeyRows) {
    return t(key, query);
  } else {
    return t(query, key);
  }
}

// S -> P in place; kMasked: keys outside the query row's window set to 0 (the caller branches on
// whether the tile needs it, so that each path is straight-line code).
template <bool kMasked, bool kKeyRows, class Scores, class Coords>
__device__ __forceinline__ void probabilities(Scores& scores, const Coords& coords, const float* lse_log2,
                                                 float scale_log2, const MaskSpec& mask, int m0, int n0, int len_q) {
  using namespace cute;
  constexpr int kQueries = decltype(size<kKeyRows ? 1 : 0>(scores))::value;
  constexpr int kKeys = decltype(size<kKeyRows ? 0 : 1>(scores))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int q = 0; q < kQueries; ++q) {
    const int query = get<kKeyRows ? 1 : 0>(at_query_key<kKeyRows>(coords, q, 0));
    const float lse2 = lse_log2[query];
    if constexpr (kMasked) {
      const int i = m0 + query;
      const int begin = static_cast<int>(mask.col_begin(i)) - n0;
      const int end = (i < len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kKeys; ++k) {
        const int j = get<kKeyRows ? 0 : 1>(at_query_key<kKeyRows>(coords, 0, k));
        float& s = at_query_key<kKeyRows>(scores, q, k);
        const float prob = fast_exp2(fmaf(s, scale_log2, -lse2));
        s = (j >= begin && j < end) ? prob : 0.0f;
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kKeys; ++k) {
        float& s = at_query_key<kKeyRows>(scores, q, k);
        s = fast_exp2(fmaf(s, scale_log2, -lse2));
      }
    }
  }
}

// dP -> dS in place, from P.
template <bool kKeyRows, class Dp, class Probs, class Coords>
__device__ __forceinline__ void dscores(Dp& dp, const Probs& probs, const Coords& coords, const float* dsum) {
  using namespace cute;
  constexpr int kQueries = decltype(size<kKeyRows ? 1 : 0>(dp))::value;
  constexpr int kKeys = decltype(size<kKeyRows ? 0 : 1>(dp))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int q = 0; q < kQueries; ++q) {
    const float d = dsum[get<kKeyRows ? 1 : 0>(at_query_key<kKeyRows>(coords, q, 0))];
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < kKeys; ++k) {
      float& x = at_query_key<kKeyRows>(dp, q, k);
      x = at_query_key<kKeyRows>(probs, q, k) * (x - d);
    }
  }
}

}  // namespace flashtrain::cuda::sm90
