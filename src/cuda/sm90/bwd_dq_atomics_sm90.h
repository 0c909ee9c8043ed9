// The D = 256 backward's dQ additions into dq_accum: the split-D kernel's (bwd_split_kernel_sm90.h)
// one vector reduction (red.global.add.v2.f32) per column pair of the thread's wgmma accumulator
// rows, each row's address and bounds test computed once; the wide kernel's
// (bwd_wide_kernel_sm90.h) 16-byte reductions of two lanes' pairs (add_rows_reduce_quads).
//
// Why not sm80::add_dq_tile (its form until run 32): with the generic per-element form - the
// address from the element's (row, column) times the row stride, then `if (row < rows)
// atomicAdd(float2)` - ptxas (nvcc 13.0) recomputes a 64-bit address per reduction, wraps each in a
// divergence branch (BSSY / BRA / BSYNC), and, short of registers, builds the next address in the
// registers the previous REDG is still to read, so that every reduction waits for the one before it
// to take its operands (SASS of the pair kernel: about 12 instructions per reduction, 34 branches
// per 32 reductions). Here the column offsets are constants (the accumulator's static layout), so
// each reduction is one REDG at [row address + immediate], under one bounds branch a row.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>

#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

// ptr[0 .. 1] += (x, y): relaxed, device scope, as atomicAdd(float2*).
__device__ __forceinline__ void red_add_f32x2(float* ptr, float x, float y) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" : : "l"(ptr), "f"(x), "f"(y) : "memory");
}

// Adds rows [0, rows) of this thread's part of a (kRows x kCols) wgmma accumulator `acc` (thr's
// partition of the tile) into the fp32 tile at `tile` (row stride `row_stride` floats), column pair
// by column pair: pair(index, x, y) gives the two values to add for the pair (x, y) of acc at
// position `index` of the fragment's register order.
template <int kRows, int kCols, class ThrMma, class Acc, class Pair>
__device__ __forceinline__ void add_rows_reduce_pairs(float* tile, int64_t row_stride, ThrMma const& thr,
                                                      Acc const& acc, int rows, Pair&& pair) {
  using namespace cute;
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
  Tensor coord_rc = make_tensor(coord.data(), accumulator_rowcol(coord.layout()));
  Tensor acc_rc = make_tensor(acc.data(), accumulator_rowcol(acc.layout()));
  constexpr auto kRowCol = accumulator_rowcol(decltype(acc.layout()){});
  static_assert(decltype(size<1>(acc_rc))::value % 2 == 0, "accumulator rows come in column pairs");
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < size<0>(acc_rc); ++r) {
    const int row = get<0>(coord_rc(r, 0));
    const int col = get<1>(coord_rc(r, 0));
    float* row_ptr = tile + row * row_stride + col;
    if (row < rows) {  // one divergent branch a row (ptxas branches around each predicated REDG)
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(acc_rc); c += 2) {
        const float2 v = pair(static_cast<int>(kRowCol(r, c)), acc_rc(r, c), acc_rc(r, c + 1));
        // The column's distance from the row's first is a constant of the layout.
        red_add_f32x2(row_ptr + (get<1>(coord_rc(r, c)) - col), v.x, v.y);
      }
    }
  }
}

// ptr[0 .. 3] += v: relaxed, device scope; ptr 16-byte aligned.
__device__ __forceinline__ void red_add_f32x4(float* ptr, float4 v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n"
               :
               : "l"(ptr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

// add_rows_reduce with half the reductions, each 16 bytes: in a wgmma accumulator row, a lane
// holds a column pair in each 8-column group (columns 2 (lane % 4) + {0, 1} of it), and lanes l and
// l ^ 1 hold the two pairs next to each other. Of each two groups g, g + 1, the even lane takes its
// partner's pair of g (columns + 2, + 3 beside its own) and the odd lane its partner's pair of g + 1
// (columns + 6, + 7 beside its own, 6 past its pair of g), one shuffle each way; each then adds 4
// contiguous columns, so a warp's reduction covers 64 bytes of each of its 8 rows instead of 32.
// Both lanes of a pair hold the same rows, so each row's bounds test stays one branch; the
// shuffles run for every row, outside it. `lane` is the thread's lane in its warp. Requires 16-byte
// aligned rows (dq_accum's rows: heads * D floats; the tile's column offset a multiple of 4).
// The layout facts used are checked on the host (tests/cpp/sm90_smem_layout_test.cu,
// WideDqQuadReductionsMatchCute).
template <int kRows, int kCols, class ThrMma, class Acc>
__device__ __forceinline__ void add_rows_reduce_quads(float* tile, int64_t row_stride, ThrMma const& thr,
                                                      Acc const& acc, int rows, int lane) {
  using namespace cute;
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
  Tensor coord_rc = make_tensor(coord.data(), accumulator_rowcol(coord.layout()));
  Tensor acc_rc = make_tensor(acc.data(), accumulator_rowcol(acc.layout()));
  static_assert(decltype(size<1>(acc_rc))::value % 4 == 0, "accumulator rows come in pairs of column pairs");
  const bool odd = (lane & 1) != 0;
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < size<0>(acc_rc); ++r) {
    const int row = get<0>(coord_rc(r, 0));
    const int col = get<1>(coord_rc(r, 0));
    float* row_ptr = tile + row * row_stride + col + (odd ? 6 : 0);
    float4 quads[decltype(size<1>(acc_rc))::value / 4];
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < size<1>(acc_rc); c += 4) {
      const float send0 = odd ? acc_rc(r, c) : acc_rc(r, c + 2);
      const float send1 = odd ? acc_rc(r, c + 1) : acc_rc(r, c + 3);
      const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
      const float got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
      quads[c / 4] = odd ? make_float4(got0, got1, acc_rc(r, c + 2), acc_rc(r, c + 3))
                         : make_float4(acc_rc(r, c), acc_rc(r, c + 1), got0, got1);
    }
    if (row < rows) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(acc_rc); c += 4) red_add_f32x4(row_ptr + (get<1>(coord_rc(r, c)) - col), quads[c / 4]);
    }
  }
}

// add_rows_reduce_pairs of acc itself.
template <int kRows, int kCols, class ThrMma, class Acc>
__device__ __forceinline__ void add_rows_reduce(float* tile, int64_t row_stride, ThrMma const& thr, Acc const& acc,
                                                int rows) {
  add_rows_reduce_pairs<kRows, kCols>(tile, row_stride, thr, acc, rows,
                                      [](int, float x, float y) { return make_float2(x, y); });
}

// add_rows_reduce of acc plus scale times the peer block's share of the same elements, read from
// shared memory as each reduction goes out (the share's register order: the v-th four values of
// this thread's fragment at share + v * kShareVecStride bytes). Summing as the reductions issue
// keeps two values a column pair live instead of the whole share.
template <int kRows, int kCols, int kShareVecStride, class ThrMma, class Acc>
__device__ __forceinline__ void add_rows_reduce_with_share(float* tile, int64_t row_stride, ThrMma const& thr,
                                                           Acc const& acc, int rows, uint32_t share, float scale) {
  add_rows_reduce_pairs<kRows, kCols>(tile, row_stride, thr, acc, rows, [&](int index, float x, float y) {
    float2 peer;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                 : "=f"(peer.x), "=f"(peer.y)
                 : "r"(share + static_cast<uint32_t>((index / 4) * kShareVecStride + (index % 4) * 4)));
    return make_float2(fmaf(peer.x, scale, x), fmaf(peer.y, scale, y));
  });
}

}  // namespace flashtrain::cuda::sm90
