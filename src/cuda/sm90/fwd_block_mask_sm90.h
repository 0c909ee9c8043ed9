// Which K tiles a query block visits and which of them need per-element masking.
// Semantics come from MaskSpec (src/common/mask.h): row i sees columns [col_begin(i), col_end(i)),
// and col_end is clipped to seqlen_k, so the ragged last K tile and causal / sliding-window
// boundaries are all the same rule. Fully masked tiles are never loaded. Host-callable so the
// tile ranges are tested on the CPU against MaskSpec itself (tests/cpp/test_sm90_fwd.cpp).
#pragma once
#include <cstdint>

#include "../../common/host_device.h"
#include "../../common/mask.h"

namespace flashtrain::cuda::sm90 {

template <int kBlockM, int kBlockN>
struct BlockMask {
  MaskSpec spec;
  int n_min = 0, n_max = 0;  // K tiles [n_min, n_max) hold every visible column of the block
  // Tile n needs no masking when it lies inside every row's window: n * kBlockN >= the largest
  // col_begin and (n + 1) * kBlockN <= the smallest col_end of the block's rows.
  int64_t interior_begin = 0, interior_end = 0;

  FT_HOST_DEVICE BlockMask(const MaskSpec& mask, int m_block, int seqlen_q) : spec(mask) {
    const int64_t first_row = int64_t(m_block) * kBlockM;
    const int64_t last_row = (first_row + kBlockM < seqlen_q ? first_row + kBlockM : seqlen_q) - 1;
    // col_begin and col_end are non-decreasing in the row, so the block's union of windows is
    // [col_begin(first_row), col_end(last_row)).
    const int64_t lo = mask.col_begin(first_row);
    const int64_t hi = mask.col_end(last_row);
    n_min = static_cast<int>(lo / kBlockN);
    n_max = hi <= lo ? n_min : static_cast<int>((hi + kBlockN - 1) / kBlockN);
    interior_begin = mask.col_begin(last_row);
    interior_end = mask.col_end(first_row);
  }

  FT_HOST_DEVICE int num_tiles() const { return n_max - n_min; }

  FT_HOST_DEVICE bool needs_mask(int n_block) const {
    return !(int64_t(n_block) * kBlockN >= interior_begin && int64_t(n_block + 1) * kBlockN <= interior_end);
  }
};

}  // namespace flashtrain::cuda::sm90
