// Causal / sliding-window masking and the softcap / ALiBi score transform applied to register
// tiles, using the shared definitions of src/common/mask.h. Also the tile-level question the
// main loops ask: which key (query) tiles can a query (key) tile see at all.
#pragma once
#include <cmath>
#include <cstdint>

#include <cute/tensor.hpp>

#include "../../common/mask.h"

namespace flashtrain::cuda {

// Key tiles [begin, end) (in units of block_n columns) that query rows [row_begin, row_end) can
// see; begin >= end when none. col_begin/col_end are non-decreasing in the row, so the first
// row bounds the start and the last row bounds the end.
struct TileRange {
  int begin;
  int end;
  __host__ __device__ bool empty() const { return begin >= end; }
};

__host__ __device__ inline TileRange visible_key_tiles(const MaskSpec& mask, int row_begin, int row_end,
                                                       int block_n) {
  const int64_t col_begin = mask.col_begin(row_begin);
  const int64_t col_end = mask.col_end(row_end - 1);
  if (col_begin >= col_end) return {0, 0};
  return {static_cast<int>(col_begin / block_n), static_cast<int>((col_end + block_n - 1) / block_n)};
}

// Query tiles [begin, end) (units of block_m rows) that see any of key columns
// [col_begin, col_end), for kernels that iterate over queries inside a key tile. Rows are
// limited to [0, seqlen_q).
__host__ __device__ inline TileRange visible_query_tiles(const MaskSpec& mask, int col_begin, int col_end,
                                                         int seqlen_q, int block_m) {
  // Row i sees column j iff j - diag - right <= i (right >= 0) and i <= j - diag + left (left >= 0).
  int64_t first = 0, last = seqlen_q - 1;
  if (mask.right >= 0 && col_begin - mask.diag - mask.right > first) first = col_begin - mask.diag - mask.right;
  if (mask.left >= 0 && col_end - 1 - mask.diag + mask.left < last) last = col_end - 1 - mask.diag + mask.left;
  if (col_begin >= mask.seqlen_k || first > last) return {0, 0};
  return {static_cast<int>(first / block_m), static_cast<int>(last / block_m + 1)};
}

// Inverse of visible_query_tiles over key tiles: the first key tile (units of block_n) that
// reaches the query tile starting at row m0. The key tiles reaching a query tile are contiguous,
// so this is where the deterministic order of the backward's dQ additions starts.
__host__ __device__ inline int first_key_tile(const MaskSpec& mask, int m0, int block_n) {
  if (mask.left < 0) return 0;
  const int64_t a = m0 + mask.diag - mask.left;
  const int64_t n = a >= 0 ? a / block_n : -((-a + block_n - 1) / block_n);  // floor division
  return n < 0 ? 0 : static_cast<int>(n);
}

// S(r, c) = -inf where (row0 + row(r), col0 + col(c)) is not visible. s and coord are rowcol()
// views of an accumulator fragment and of the identity partition of its tile.
template <typename Scores, typename Coord>
__device__ __forceinline__ void mask_scores(Scores& s, const Coord& coord, const MaskSpec& mask, int row0,
                                            int col0) {
#pragma unroll
  for (int r = 0; r < decltype(cute::size<0>(s))::value; ++r) {
    const int row = row0 + cute::get<0>(coord(r, 0));
    const int begin = static_cast<int>(mask.col_begin(row));
    const int end = static_cast<int>(mask.col_end(row));
#pragma unroll
    for (int c = 0; c < decltype(cute::size<1>(s))::value; ++c) {
      const int col = col0 + cute::get<1>(coord(r, c));
      if (col < begin || col >= end) s(r, c) = -INFINITY;
    }
  }
}

// S = transform_score(scale * S) (softcap, then ALiBi with this head's slope) in natural-log
// units. Called only when softcap or ALiBi is on; otherwise the scale is folded into exp2.
template <typename Scores, typename Coord>
__device__ __forceinline__ void transform_scores(Scores& s, const Coord& coord, float scale, float softcap,
                                                 float slope, int64_t diag, int row0, int col0) {
#pragma unroll
  for (int r = 0; r < decltype(cute::size<0>(s))::value; ++r) {
    const int row = row0 + cute::get<0>(coord(r, 0));
#pragma unroll
    for (int c = 0; c < decltype(cute::size<1>(s))::value; ++c) {
      const int col = col0 + cute::get<1>(coord(r, c));
      s(r, c) = transform_score<float>(s(r, c) * scale, softcap, slope, row, col, diag);
    }
  }
}

}  // namespace flashtrain::cuda
