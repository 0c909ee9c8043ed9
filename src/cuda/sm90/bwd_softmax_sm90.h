// The elementwise stage of the sm90 backward main kernels (bwd_kernel_sm90.h,
// bwd_split_kernel_sm90.h; bwd_wide_kernel_sm90.h's untransposed tiles at the end), on a
// consumer's transposed (keys x queries) accumulator tiles in
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

// S^T -> P^T in place; kMasked: keys outside the query row's window set to 0 (the caller branches
// on whether the tile needs it, so that each path is straight-line code).
template <bool kMasked, class Scores, class Coords>
__device__ __forceinline__ void probabilities_t(Scores& scores, const Coords& coords, const float* lse_log2,
                                                float scale_log2, const MaskSpec& mask, int m0, int n0, int len_q) {
  using namespace cute;
  constexpr int kRows = decltype(size<0>(scores))::value;
  constexpr int kCols = decltype(size<1>(scores))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int c = 0; c < kCols; ++c) {
    const float lse2 = lse_log2[get<1>(coords(0, c))];
    if constexpr (kMasked) {
      const int i = m0 + get<1>(coords(0, c));
      const int begin = static_cast<int>(mask.col_begin(i)) - n0;
      const int end = (i < len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int j = get<0>(coords(r, 0));
        const float prob = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
        scores(r, c) = (j >= begin && j < end) ? prob : 0.0f;
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) scores(r, c) = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
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

// The same two steps on (queries x keys) tiles in (row = query, column = key) view, coords giving
// (query, key) (the wide-key-tile kernel, bwd_wide_kernel_sm90.h): S -> P in place.
template <bool kMasked, class Scores, class Coords>
__device__ __forceinline__ void probabilities(Scores& scores, const Coords& coords, const float* lse_log2,
                                              float scale_log2, const MaskSpec& mask, int m0, int n0, int len_q) {
  using namespace cute;
  constexpr int kRows = decltype(size<0>(scores))::value;
  constexpr int kCols = decltype(size<1>(scores))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const float lse2 = lse_log2[get<0>(coords(r, 0))];
    if constexpr (kMasked) {
      const int i = m0 + get<0>(coords(r, 0));
      const int begin = static_cast<int>(mask.col_begin(i)) - n0;
      const int end = (i < len_q ? static_cast<int>(mask.col_end(i)) : 0) - n0;
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const int j = get<1>(coords(0, c));
        const float prob = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
        scores(r, c) = (j >= begin && j < end) ? prob : 0.0f;
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) scores(r, c) = fast_exp2(fmaf(scores(r, c), scale_log2, -lse2));
    }
  }
}

// dP -> dS in place, from P, (row = query, column = key).
template <class Dp, class Probs, class Coords>
__device__ __forceinline__ void dscores(Dp& dp, const Probs& probs, const Coords& coords, const float* dsum) {
  using namespace cute;
  constexpr int kRows = decltype(size<0>(dp))::value;
  constexpr int kCols = decltype(size<1>(dp))::value;
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const float d = dsum[get<0>(coords(r, 0))];
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kCols; ++c) dp(r, c) = probs(r, c) * (dp(r, c) - d);
  }
}

}  // namespace flashtrain::cuda::sm90
