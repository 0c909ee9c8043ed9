// Building blocks every sm80 kernel composes its tiles from: the mma.sync atom per element type,
// a tiled MMA with warps stacked along M, swizzled shared-memory layouts for row-major tiles, and
// the 128-bit global<->shared copies that fill and drain them.
#pragma once
#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/numeric_types.h>

namespace flashtrain::cuda {

constexpr int kWarpSize = 32;
constexpr int kCopyBytes = 16;  // one cp.async / ld.global.v4: 8 fp16 or bf16 elements

// m16n8k16 with fp32 accumulators, the only mma.sync shape fp16 and bf16 share on sm80+.
template <typename Element>
struct MmaAtomFor;
template <>
struct MmaAtomFor<cutlass::half_t> {
  using type = cute::SM80_16x8x16_F32F16F16F32_TN;
};
template <>
struct MmaAtomFor<cutlass::bfloat16_t> {
  using type = cute::SM80_16x8x16_F32BF16BF16F32_TN;
};

// kWarpsM x kWarpsN warps, each owning 16-row slabs. The permutation tile is 16 wide in N (two
// n8 atoms per warp) so one ldmatrix.x4 feeds a whole k16 x n16 B fragment.
template <typename Element, int kWarpsM, int kWarpsN = 1>
using TiledMmaFor = cute::TiledMMA<cute::MMA_Atom<typename MmaAtomFor<Element>::type>,
                                   cute::Layout<cute::Shape<cute::Int<kWarpsM>, cute::Int<kWarpsN>, cute::_1>>,
                                   cute::Tile<cute::Int<16 * kWarpsM>, cute::Int<16 * kWarpsN>, cute::_16>>;

// Swizzled layout of a row-major (kRows x kCols) tile of 2-byte elements in shared memory.
// Rows are cut into 64-element (128-byte) chunks when kCols allows it, else 32-element ones
// (head dim 96); the XOR swizzle spreads the 8 rows one ldmatrix reads over all 32 banks.
template <int kCols>
struct SmemAtomFor {
  static constexpr int kAtomCols = kCols % 64 == 0 ? 64 : 32;
  static_assert(kCols % 32 == 0, "tile width must be a multiple of 32 elements");
  static constexpr int kSwizzleBits = kAtomCols == 64 ? 3 : 2;
  using type = decltype(cute::composition(
      cute::Swizzle<kSwizzleBits, 3, 3>{},
      cute::Layout<cute::Shape<cute::_8, cute::Int<kAtomCols>>, cute::Stride<cute::Int<kAtomCols>, cute::_1>>{}));
};

template <int kRows, int kCols>
using SmemRowMajor = decltype(cute::tile_to_shape(typename SmemAtomFor<kCols>::type{},
                                                  cute::Shape<cute::Int<kRows>, cute::Int<kCols>>{}));

// The transposed (kCols x kRows) view of a SmemRowMajor tile: the B operand of a GEMM that
// contracts over the tile's rows (P @ V contracts over the key rows of V).
template <int kRows, int kCols>
using SmemRowMajorTransposed = decltype(cute::composition(
    SmemRowMajor<kRows, kCols>{},
    cute::make_layout(cute::Shape<cute::Int<kCols>, cute::Int<kRows>>{}, cute::GenRowMajor{})));

// Thread arrangement of a 128-bit copy of row-major tiles kCols wide: each thread moves 8
// contiguous elements, a row of threads covers one swizzle chunk so stores to shared memory
// never conflict.
template <typename Element, int kThreads, int kCols>
struct GmemCopyFor {
  static_assert(sizeof(Element) == 2, "tiles hold fp16 or bf16");
  static constexpr int kElemsPerCopy = kCopyBytes / sizeof(Element);
  static constexpr int kThreadsPerRow = SmemAtomFor<kCols>::kAtomCols / kElemsPerCopy;
  static_assert(kThreads % kThreadsPerRow == 0, "threads must fill whole rows");
  static constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
  using ThreadLayout = cute::Layout<cute::Shape<cute::Int<kRowsPerPass>, cute::Int<kThreadsPerRow>>,
                                    cute::Stride<cute::Int<kThreadsPerRow>, cute::_1>>;
  using ValueLayout = cute::Layout<cute::Shape<cute::_1, cute::Int<kElemsPerCopy>>>;
  // global -> shared, asynchronous (cp.async.cg: bypasses L1, K/V tiles are read once per block)
  using Load = decltype(cute::make_tiled_copy(
      cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, ThreadLayout{}, ValueLayout{}));
  // shared -> global or global -> registers, synchronous 128-bit
  using Store = decltype(cute::make_tiled_copy(cute::Copy_Atom<cute::UniversalCopy<cute::uint128_t>, Element>{},
                                               ThreadLayout{}, ValueLayout{}));
};

// ldmatrix atoms for the operands of TiledMmaFor: A and B row-major (x4), and B transposed.
template <typename Element>
using SmemLoadAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, Element>;
template <typename Element>
using SmemLoadTransposedAtom = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, Element>;
// registers -> shared for the epilogue (32-bit: two accumulators converted to a half2 pair)
template <typename Element>
using SmemStoreAtom = cute::Copy_Atom<cute::UniversalCopy<uint32_t>, Element>;

}  // namespace flashtrain::cuda
