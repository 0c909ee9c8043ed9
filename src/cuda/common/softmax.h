// Online softmax over key tiles (FlashAttention-2), fp32, for the rows one thread holds in an
// m16n8 accumulator. Scores stay in the units the GEMM produced; `scale_log2` (softmax scale *
// log2(e), or log2(e) when scores were already transformed to natural units) is folded into one
// FMA before exp2, so no pass over the tile multiplies by the scale.
//
// Fully masked rows (every score -inf) keep max = -inf; the exp2 offset then uses 0 instead of
// -inf, so probabilities are exp2(-inf) = 0 rather than NaN, the row sum stays 0 and finalize()
// writes out = 0 and lse = -inf.
#pragma once
#include <cmath>

#include <cute/tensor.hpp>

#include "fast_math.h"
#include "fragment.h"

namespace flashtrain::cuda {

template <int kRows>
struct OnlineSoftmax {
  float row_max[kRows];  // running max of the raw scores, -inf until a visible key is seen
  float row_sum[kRows];  // this thread's partial sum of exp2(...) over its columns

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
  }

  // Folds one tile of scores into the running statistics: s (rowcol view, kRows x cols) becomes
  // the unnormalised probabilities exp2(s * scale_log2 - max * scale_log2), and acc (rowcol view
  // of the output accumulator) is rescaled by exp2(old max - new max). On the first tile the
  // old max is -inf, so the factor is exp2(-inf) = 0 applied to a zero accumulator: harmless.
  template <typename Scores, typename Acc>
  __device__ __forceinline__ void update(Scores& s, Acc& acc, float scale_log2) {
    static_assert(decltype(cute::size<0>(s))::value == kRows, "rows of the score tile");
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
#pragma unroll
      for (int c = 0; c < decltype(cute::size<1>(s))::value; ++c) m = fmaxf(m, s(r, c));
      m = quad_max(m);
      const float offset = softmax_offset(m, scale_log2);
      const float correction = softmax_rescale(row_max[r], scale_log2, offset);
#pragma unroll
      for (int c = 0; c < decltype(cute::size<1>(acc))::value; ++c) acc(r, c) *= correction;
      row_max[r] = m;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < decltype(cute::size<1>(s))::value; ++c) {
        s(r, c) = fast_exp2(fmaf(s(r, c), scale_log2, -offset));
        sum += s(r, c);
      }
      row_sum[r] = row_sum[r] * correction + sum;
    }
  }

  // Normalises acc by the row sums times out_scale (1 / (1 - p) under dropout) and writes each
  // row's natural-log lse into lse[r]: -inf with acc = 0 for rows that saw no key.
  template <typename Acc>
  __device__ __forceinline__ void finalize(Acc& acc, float scale_log2, float out_scale, float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.0f);
      const float inv = empty ? 0.0f : out_scale / sum;
      lse[r] = empty ? -INFINITY : lse_from_row_stats(row_max[r], scale_log2, sum);
#pragma unroll
      for (int c = 0; c < decltype(cute::size<1>(acc))::value; ++c) acc(r, c) *= inv;
    }
  }
};

}  // namespace flashtrain::cuda
