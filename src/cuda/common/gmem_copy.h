// Row-guarded tile copies between global and shared memory. Tiles are cut from a sequence whose
// length is not a multiple of the tile height: rows past the end are never read (and are
// zero-filled in shared memory, so a 0 probability never meets a stale NaN: 0 * NaN = NaN) and
// never written back.
#pragma once
#include <cute/tensor.hpp>

namespace flashtrain::cuda {

// src, dst, coord: (CPY, CPY_M, CPY_K) partitions of the same tile by one tiled copy; coord is the
// partition of an identity tensor over the tile, so get<0>(coord) is the row inside the tile.
// Rows with row >= valid_rows are skipped; kZeroFillSkipped clears them in dst instead.
template <bool kZeroFillSkipped, typename TiledCopy, typename Src, typename Dst, typename Coord>
__device__ __forceinline__ void copy_rows(const TiledCopy& copy, const Src& src, Dst&& dst, const Coord& coord,
                                          int valid_rows) {
  using cute::_;
#pragma unroll
  for (int m = 0; m < decltype(cute::size<1>(dst))::value; ++m) {
    if (cute::get<0>(coord(0, m, 0)) < valid_rows) {
      cute::copy(copy, src(_, m, _), dst(_, m, _));
    } else if constexpr (kZeroFillSkipped) {
      cute::clear(dst(_, m, _));
    }
  }
}

}  // namespace flashtrain::cuda
