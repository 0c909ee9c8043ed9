// Online softmax of one consumer thread's rows of the S tile, in fp32 with exp2: scores are
// scaled by softmax_scale * log2(e) inside one FFMA, so P = exp2(s * scale_log2 - max * scale_log2).
// Row sums stay per-thread partial sums until finalize(); only the row max is reduced across the
// four threads (a quad) that share a row in the wgmma accumulator layout.
#pragma once
#include <cmath>

#include <cute/tensor.hpp>

#include "../common/fast_math.h"

namespace flashtrain::cuda::sm90 {

template <int kRows>
struct OnlineSoftmax {
  // The four lanes of a quad hold the columns of the same rows.
  static constexpr int kQuadLanes = 4;
  // Independent max / sum chains per row: a single chain over 32 columns would serialise on
  // the FMNMX / FADD latency.
  static constexpr int kChains = 4;

  float scale_log2;
  float row_max[kRows];  // raw (unscaled) running max; -inf while a row has seen no visible key
  float row_sum[kRows];  // this thread's partial sum of exp2, relative to row_max

  __device__ __forceinline__ explicit OnlineSoftmax(float scale) : scale_log2(scale * kLog2e) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
  }

  static __device__ __forceinline__ float quad_max(float x) {
    CUTLASS_PRAGMA_UNROLL
    for (int offset = 1; offset < kQuadLanes; offset *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
  }
  static __device__ __forceinline__ float quad_sum(float x) {
    CUTLASS_PRAGMA_UNROLL
    for (int offset = 1; offset < kQuadLanes; offset *= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
  }

  // Folds one (rows, cols) tile of raw scores into the running statistics and overwrites the
  // scores with exp2 relative to the new max. Returns in `o_scale` the factor the output
  // accumulator of each row must be multiplied by before this tile's P V is added.
  template <bool kFirst, class ScoreTensor>
  __device__ __forceinline__ void update(ScoreTensor& scores, float (&o_scale)[kRows]) {
    static_assert(decltype(cute::size<0>(scores))::value == kRows, "row count mismatch");
    constexpr int kCols = decltype(cute::size<1>(scores))::value;
    static_assert(kCols % kChains == 0, "columns must split evenly over the reduction chains");
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float partial[kChains];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kChains; ++i) partial[i] = row_max[r];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) partial[c % kChains] = fmaxf(partial[c % kChains], scores(r, c));
      float m = partial[0];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 1; i < kChains; ++i) m = fmaxf(m, partial[i]);
      m = quad_max(m);
      // A row with no visible key so far keeps max -inf and offset 0: its P is exactly 0.
      const float m_scaled = softmax_offset(m, scale_log2);
      o_scale[r] = kFirst ? 1.0f : softmax_rescale(row_max[r], scale_log2, m_scaled);
      row_max[r] = m;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kChains; ++i) partial[i] = 0.0f;
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const float p = fast_exp2(fmaf(scores(r, c), scale_log2, -m_scaled));
        scores(r, c) = p;
        partial[c % kChains] += p;
      }
      float sum = partial[0];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 1; i < kChains; ++i) sum += partial[i];
      row_sum[r] = kFirst ? sum : fmaf(row_sum[r], o_scale[r], sum);
    }
  }

  // Multiplies each row of a (rows, cols) accumulator by its factor.
  template <class AccTensor>
  static __device__ __forceinline__ void scale_rows(AccTensor& acc, const float (&factor)[kRows]) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < cute::size<1>(acc); ++c) acc(r, c) *= factor[r];
    }
  }

  // Final statistics: the factor 1 / rowsum that normalises the output (0 for a row that saw
  // no key, so its output is exactly 0) and lse = ln(sum_j exp(s_j)) in natural log (-inf for
  // such a row).
  __device__ __forceinline__ void finalize(float (&inv_sum)[kRows], float (&lse)[kRows]) const {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = sum == 0.0f;
      inv_sum[r] = empty ? 0.0f : 1.0f / sum;
      lse[r] = empty ? -INFINITY : lse_from_row_stats(row_max[r], scale_log2, sum);
    }
  }
};

}  // namespace flashtrain::cuda::sm90
