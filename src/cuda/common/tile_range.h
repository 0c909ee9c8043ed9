// The tile-level questions of the main loops, on the host and the device: which key (query) tiles
// a query (key) tile can see at all, and where the deterministic dQ order starts. Free of CuTe so
// CPU-only builds test them against MaskSpec (tests/cpp/test_sm90_fwd.cpp).
#pragma once
#include <cstdint>

#include "../../common/host_device.h"
#include "../../common/mask.h"

namespace flashtrain::cuda {

// Key tiles [begin, end) (in units of block_n columns) that query rows [row_begin, row_end) can
// see; begin >= end when none. col_begin/col_end are non-decreasing in the row, so the first
// row bounds the start and the last row bounds the end.
struct TileRange {
  int begin;
  int end;
  FT_HOST_DEVICE bool empty() const { return begin >= end; }
};

FT_HOST_DEVICE TileRange visible_key_tiles(const MaskSpec& mask, int row_begin, int row_end,
                                                       int block_n) {
  const int64_t col_begin = mask.col_begin(row_begin);
  const int64_t col_end = mask.col_end(row_end - 1);
  if (col_begin >= col_end) return {0, 0};
  return {static_cast<int>(col_begin / block_n), static_cast<int>((col_end + block_n - 1) / block_n)};
}

// Query tiles [begin, end) (units of block_m rows) that see any of key columns
// [col_begin, col_end), for kernels that iterate over queries inside a key tile. Rows are
// limited to [0, seqlen_q).
FT_HOST_DEVICE TileRange visible_query_tiles(const MaskSpec& mask, int col_begin, int col_end,
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
FT_HOST_DEVICE int first_key_tile(const MaskSpec& mask, int m0, int block_n) {
  if (mask.left < 0) return 0;
  const int64_t a = m0 + mask.diag - mask.left;
  const int64_t n = a >= 0 ? a / block_n : -((-a + block_n - 1) / block_n);  // floor division
  return n < 0 ? 0 : static_cast<int>(n);
}

}  // namespace flashtrain::cuda
