// Causal / sliding-window masking and the softcap / ALiBi score transform applied to register
// tiles, using the shared definitions of src/common/mask.h. The tile-level questions (which key
// (query) tiles a query (key) tile sees at all) are in tile_range.h.
#pragma once
#include <cmath>
#include <cstdint>

#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "tile_range.h"

namespace flashtrain::cuda {

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
