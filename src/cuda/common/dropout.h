// Dropout on a register tile of probabilities with exactly the bits of src/common/philox.h.
//
// One Philox call yields the words of four adjacent columns of one row. In an m16n8 accumulator
// the lanes 2t and 2t+1 of a quad hold columns 4g..4g+1 and 4g+2..4g+3 of the same two rows
// (lane / 4 and lane / 4 + 8), so both need the same two Philox calls. Each lane of the pair
// computes one of them (the even lane the upper row, the odd lane the lower row) and they swap
// the two words the other needs: half the Philox work of computing every call in every lane.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>

#include "../../common/philox.h"

namespace flashtrain::cuda {

struct DropoutParams {
  uint64_t seed;
  uint64_t offset;
  uint32_t threshold;  // kept iff the Philox word >= threshold
};

// p, coord: rowcol() views of an m16n8 accumulator fragment and of the identity partition of its
// tile. row0 / col0: position of the tile inside the sequence (col0 a multiple of 4); bh =
// b * Hq + h. Dropped probabilities become 0; kept ones are left unscaled (the caller scales the
// output by 1 / (1 - p) once). All 32 lanes of the warp must call it together.
template <typename Probs, typename Coord>
__device__ __forceinline__ void apply_dropout(Probs& p, const Coord& coord, const DropoutParams& d, uint32_t bh,
                                              int row0, int col0) {
  constexpr int kRowBlocks = decltype(cute::size<0, 1>(p))::value;  // MMA_M
  constexpr int kColBlocks = decltype(cute::size<1, 1>(p))::value;  // MMA_N
  static_assert(decltype(cute::size<0, 0>(p))::value == 2 && decltype(cute::size<1, 0>(p))::value == 2,
                "expects the rowcol view of an m16n8 accumulator");
  using cute::make_coord;
#pragma unroll
  for (int mi = 0; mi < kRowBlocks; ++mi) {
    const uint32_t row_hi = row0 + cute::get<0>(coord(make_coord(0, mi), make_coord(0, 0)));
    const uint32_t row_lo = row0 + cute::get<0>(coord(make_coord(1, mi), make_coord(0, 0)));
#pragma unroll
    for (int ni = 0; ni < kColBlocks; ++ni) {
      const uint32_t col = col0 + cute::get<1>(coord(make_coord(0, mi), make_coord(0, ni)));
      const bool even = ((col >> 1) & 1u) == 0;  // this lane holds words 0,1 (else 2,3) of the group
      const Philox4 r = dropout_bits(d.seed, d.offset, bh, even ? row_hi : row_lo, col >> 2);
      const uint32_t send0 = even ? r.x[2] : r.x[0];
      const uint32_t send1 = even ? r.x[3] : r.x[1];
      const uint32_t recv0 = __shfl_xor_sync(0xffffffffu, send0, 1);
      const uint32_t recv1 = __shfl_xor_sync(0xffffffffu, send1, 1);
      const uint32_t hi0 = even ? r.x[0] : recv0, hi1 = even ? r.x[1] : recv1;
      const uint32_t lo0 = even ? recv0 : r.x[2], lo1 = even ? recv1 : r.x[3];
      auto& p_hi0 = p(make_coord(0, mi), make_coord(0, ni));
      auto& p_hi1 = p(make_coord(0, mi), make_coord(1, ni));
      auto& p_lo0 = p(make_coord(1, mi), make_coord(0, ni));
      auto& p_lo1 = p(make_coord(1, mi), make_coord(1, ni));
      if (hi0 < d.threshold) p_hi0 = 0.0f;
      if (hi1 < d.threshold) p_hi1 = 0.0f;
      if (lo0 < d.threshold) p_lo0 = 0.0f;
      if (lo1 < d.threshold) p_lo1 = 0.0f;
    }
  }
}

}  // namespace flashtrain::cuda
