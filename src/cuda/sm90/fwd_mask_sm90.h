// Per-element masking of the S tiles that BlockMask (fwd_block_mask_sm90.h) says need it: each
// consumer thread keeps the visible column range of its rows (MaskSpec, src/common/mask.h) and
// sets the scores outside it to -inf.
#pragma once
#include <cmath>
#include <cstdint>

#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "fwd_block_mask_sm90.h"

namespace flashtrain::cuda::sm90 {

// Per-thread view of the rows this thread owns in an S tile: their visible column ranges,
// computed once per query block.
template <int kRows>
struct RowWindows {
  int begin[kRows];
  int end[kRows];

  // rowcol_coords: identity tensor of the S tile partitioned like the accumulator, in
  // (row, col) form; row coordinates are relative to the block's first row.
  template <class CoordTensor>
  __device__ __forceinline__ RowWindows(const MaskSpec& spec, int first_row, CoordTensor const& rowcol_coords) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = int64_t(first_row) + cute::get<0>(rowcol_coords(r, 0));
      const int64_t b = spec.col_begin(row);
      const int64_t e = spec.col_end(row);
      begin[r] = static_cast<int>(b);
      end[r] = static_cast<int>(e < b ? b : e);  // empty windows stay empty in int
    }
  }

  // Sets the scores of columns a row does not see to -inf. `scores` is (rows, cols) and
  // `rowcol_coords` the matching identity partition; `col0` is the tile's first column.
  template <class ScoreTensor, class CoordTensor>
  __device__ __forceinline__ void apply(ScoreTensor& scores, CoordTensor const& rowcol_coords, int col0) const {
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < cute::size<1>(scores); ++c) {
      const int col = col0 + cute::get<1>(rowcol_coords(0, c));
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        if (col < begin[r] || col >= end[r]) scores(r, c) = -INFINITY;
      }
    }
  }
};

}  // namespace flashtrain::cuda::sm90
