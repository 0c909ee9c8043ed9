// The sm90 backward's register -> shared-memory stores of a step: this thread's dS^T values into
// a dS buffer, and its scaled dQ values into the TMA-reduction staging tile (the split-D kernel:
// its P^T and dS^T values into their buffers; the wide-key-tile kernel: its P and dS values).
//
// Both tiles are 128-byte swizzled (bwd_kernel_traits_sm90.h). Written through CuTe's swizzled
// smem tensors, every element became a generic 64-bit-addressed store (ST.E) after its own
// swizzle arithmetic; ncu (bf16 D 128 S 8k) put 7% of the kernel's stall samples on the dS stores
// and 16% on the dQ staging, much of it lg_throttle behind the generic stores. Here the
// thread-dependent part of each address is computed once, each store differs from it by an XOR
// of the 16-byte chunk bits and a constant, and the stores are st.shared with 32-bit addresses:
// 32-bit stores of bf16 pairs for dS, 64-bit stores of fp32 pairs for dQ.
//
// The offsets are functions of (thread, pair index) only, __host__ __device__, so that a CPU test
// (tests/cpp/sm90_smem_layout_test.cu) checks them against CuTe's layouts for every thread.
//
// Accumulator order (wgmma C fragment): value i = e + 2 h + 4 c + 4 (N/8) r holds row
// 16 warp + lane/4 + 8 h + 64 r and column 8 c + 2 (lane % 4) + e of the warpgroup's tile, so
// pair j = i / 2 is (h, c, r) = (j % 2, (j / 2) % (N/8), j / N/4).
#pragma once
#include <cstdint>

#include <cutlass/cutlass.h>

namespace flashtrain::cuda::sm90 {

// dS^T, keys x queries, into SmemLayoutdS (queries contiguous; atoms of 64 queries x 8 keys, 1 KB,
// queries' atoms first): byte offset from the dS buffers' base of pair j = (h, q8) of thread tid
// (key 64 w + 16 warp + lane/4 + 8 h, queries 8 q8 + 2 (lane % 4) + {0, 1}).
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t ds_thread_base(int tid) {
  constexpr int kAtomsM = Traits::kBlockM / 64;
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, r8 = lane / 4;
  return static_cast<uint32_t>((8 * w + 2 * warp) * kAtomsM * 1024 + r8 * 128 + 4 * (lane % 4) + r8 * 16);
}
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t ds_pair_offset(uint32_t thread_base, int j, int stage) {
  constexpr int kAtomsM = Traits::kBlockM / 64;
  constexpr int kBufferBytes = Traits::kBlockM * Traits::kBlockN * 2;
  const int h = j % 2, q8 = j / 2;
  return (thread_base ^ static_cast<uint32_t>((q8 % 8) * 16)) +
         static_cast<uint32_t>((h * kAtomsM + q8 / 8) * 1024 + stage * kBufferBytes);
}

// dQ, queries x D fp32, into SmemLayoutdQ (boxes of 32 columns, each of atoms of 8 rows x 32
// floats, 1 KB) in the staged column order (common/dq_column_order.h): byte offset from the staging
// tile's base of pair j = (h, c8, r) of thread tid (row 64 r + 16 warp + lane/4 + 8 h, columns D/2 w
// + 8 c8 + 2 (lane % 4) + {0, 1}). The pair's chunk, 2 (c8 % 4) + (lane % 4) / 2 in column order,
// is staged at (c8 % 4) + 4 ((lane % 4) / 2), and swizzled by the row (^ lane / 4): a half-warp's
// rows 0-3 (or 4-7) then write all eight chunks of a 128-byte row, two lanes a chunk, where the
// column order gave them four and took two wavefronts a half-warp (run 48's ncu table).
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t dq_thread_base(int tid) {
  constexpr int kBoxBytes = Traits::kBlockM * 128;
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, r8 = lane / 4, chunk = (lane % 4) / 2;
  return static_cast<uint32_t>(Traits::kHeadDim / 64 * w * kBoxBytes + 2 * warp * 1024 + r8 * 128 +
                               (lane % 2) * 8 + ((4 * chunk) ^ r8) * 16);
}
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t dq_pair_offset(uint32_t thread_base, int j) {
  constexpr int kBoxBytes = Traits::kBlockM * 128;
  constexpr int kColBlocks = Traits::kHeadDim / 16;  // 8-column blocks per warpgroup
  const int h = j % 2, c8 = (j / 2) % kColBlocks, r = j / (2 * kColBlocks);
  return (thread_base ^ static_cast<uint32_t>((c8 % 4) * 16)) +
         static_cast<uint32_t>((c8 / 4) * kBoxBytes + (8 * r + h) * 1024);
}

// Split-D kernel (bwd_split_traits_sm90.h): P^T or dS^T, keys x queries, into SmemLayoutPdS
// (queries contiguous; atoms of 8 keys x 64 queries, 1 KB, stacked over the keys): byte offset from
// the buffers' base of pair j = (h, c) of thread tid (key 16 warp + lane/4 + 8 h, queries
// kQueriesPerWarpGroup w + 8 c + 2 (lane % 4) + {0, 1}). The 16-byte chunk of query q in key row r
// is (q / 8) ^ (r % 8); the thread's chunks differ only in c's bits, which the XOR flips.
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t pds_thread_base(int tid) {
  static_assert(Traits::kBlockM == 64, "one 128-byte swizzle row of queries");
  constexpr int kChunksPerWarpGroup = Traits::kQueriesPerWarpGroup / 8;
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, r8 = lane / 4;
  return static_cast<uint32_t>(2 * warp * 1024 + r8 * 128 + (((kChunksPerWarpGroup * w) ^ r8) * 16) + 4 * (lane % 4));
}
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t pds_pair_offset(uint32_t thread_base, int j, int buffer) {
  constexpr int kBufferBytes = Traits::kBlockN * Traits::kBlockM * 2;
  const int h = j % 2, c = j / 2;
  return (thread_base ^ static_cast<uint32_t>(c * 16)) + static_cast<uint32_t>(h * 1024 + buffer * kBufferBytes);
}

// Wide-key-tile kernel (bwd_wide_traits_sm90.h): P or dS from its queries x keys accumulator
// into SmemLayoutPdS (keys x queries, queries contiguous; atoms of 8 keys x 64 queries, 1 KB,
// stacked over the keys). Value i = e + 2 h + 4 c of thread tid holds query 16 warp + lane/4 + 8 h
// and key 40 w + 8 c + 2 (lane % 4) + e, so its key row within an atom is 2 (lane % 4) + e and
// its 16-byte chunk (q / 8) ^ (row) = ((warp ^ lane % 4) << 1) | (h ^ e): a thread part and a
// constant one. The byte offset from the buffers' base is wide_pds_thread_base(tid) +
// wide_pds_value_offset(i, buffer), the second a constant of the unrolled store loop.
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t wide_pds_thread_base(int tid) {
  static_assert(Traits::kBlockM == 64 && Traits::kKeysPerWarpGroup % 8 == 0, "whole key atoms per warpgroup");
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, l = lane % 4;
  return static_cast<uint32_t>(Traits::kKeysPerWarpGroup / 8 * w * 1024 + 2 * l * 128 + ((warp ^ l) << 5) + (lane / 4) * 2);
}
template <class Traits>
CUTLASS_HOST_DEVICE constexpr uint32_t wide_pds_value_offset(int i, int buffer) {
  constexpr int kBufferBytes = Traits::kBlockN * Traits::kBlockM * 2;
  const int e = i % 2, h = (i / 2) % 2, c = i / 4;
  return static_cast<uint32_t>(c * 1024 + e * 128 + ((h ^ e) << 4) + buffer * kBufferBytes);
}

#ifdef __CUDACC__
#include <cuda_fp16.h>

// Wide-key-tile kernel: this thread's 16-bit P or dS values (accumulator order) into buffer
// `buffer`, one 16-bit store each (a value's neighbour in the accumulator is the next key, a row
// of the buffer away), each at the thread's base plus a constant.
template <class Traits, class Fragment>
__device__ __forceinline__ void store_pds_wide(uint32_t pds_smem, Fragment const& tile, int buffer, int tid) {
  constexpr int kValues = decltype(cute::size(tile))::value;
  const uint16_t* values = reinterpret_cast<const uint16_t*>(tile.data());
  const uint32_t base = pds_smem + wide_pds_thread_base<Traits>(tid) + wide_pds_value_offset<Traits>(0, buffer);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kValues; ++i)
    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(base + wide_pds_value_offset<Traits>(i, 0)), "h"(values[i]) : "memory");
}

// kPairs packed pairs of 16-bit dS^T values (accumulator order) into dS buffer `stage`.
template <class Traits, int kPairs>
__device__ __forceinline__ void store_ds_pairs(uint32_t ds_smem, const uint32_t* pairs, int stage, int tid) {
  const uint32_t base = ds_smem + ds_thread_base<Traits>(tid);
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kPairs; ++j)
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_pair_offset<Traits>(base, j, stage)), "r"(pairs[j]) : "memory");
}

// This thread's dS^T (16-bit values in accumulator order) into dS buffer `stage`.
template <class Traits, class Fragment>
__device__ __forceinline__ void store_ds_transposed(uint32_t ds_smem, Fragment const& ds, int stage, int tid) {
  constexpr int kPairs = decltype(cute::size(ds))::value / 2;
  store_ds_pairs<Traits, kPairs>(ds_smem, reinterpret_cast<const uint32_t*>(ds.data()), stage, tid);
}

// Split-D kernel: this thread's 16-bit P^T or dS^T values (accumulator order) into buffer `buffer`.
template <class Traits, class Fragment>
__device__ __forceinline__ void store_pds(uint32_t pds_smem, Fragment const& tile, int buffer, int tid) {
  constexpr int kPairs = decltype(cute::size(tile))::value / 2;
  const uint32_t* pairs = reinterpret_cast<const uint32_t*>(tile.data());
  const uint32_t base = pds_smem + pds_thread_base<Traits>(tid);
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kPairs; ++j)
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(pds_pair_offset<Traits>(base, j, buffer)), "r"(pairs[j]) : "memory");
}

// kScaledDs: this thread's fp32 dS^T (accumulator order) times the scale of each query column,
// rounded to fp16 pair by pair into dS buffer `stage`. col_scale: the step's s_i by query row
// (query i of pair j = (h, q8) is 8 q8 + 2 (lane % 4) + {0, 1}).
template <class Traits, class Fragment>
__device__ __forceinline__ void store_ds_transposed_scaled(uint32_t ds_smem, Fragment const& ds,
                                                           const float* col_scale, int stage, int tid) {
  constexpr int kPairs = decltype(cute::size(ds))::value / 2;
  const float2* scale2 = reinterpret_cast<const float2*>(col_scale) + tid % 4;
  // Every pair converted before the first store: the stores' memory clobbers would otherwise keep
  // each scale load behind the previous store (measured: 8-13% of the backward's time).
  uint32_t pairs[kPairs];
  CUTLASS_PRAGMA_UNROLL
  for (int q8 = 0; q8 < kPairs / 2; ++q8) {
    const float2 f = scale2[4 * q8];
    CUTLASS_PRAGMA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * q8 + h;
      const __half2 v = __floats2half2_rn(ds(2 * j) * f.x, ds(2 * j + 1) * f.y);
      pairs[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
  store_ds_pairs<Traits, kPairs>(ds_smem, pairs, stage, tid);
}

// dQ = this thread's dQ accumulator, each row times its factor: row_factor[h + 2 r] for row
// 64 r + 16 warp + lane/4 + 8 h.
template <class Traits, class Fragment, class Factors>
__device__ __forceinline__ void scale_dq_rows(Fragment& dq, Fragment const& acc, Factors const& row_factor) {
  constexpr int kPairs = decltype(cute::size(acc))::value / 2;
  constexpr int kColBlocks = Traits::kHeadDim / 16;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kPairs; ++j) {
    const float f = row_factor[j % 2 + 2 * (j / (2 * kColBlocks))];
    dq(2 * j) = acc(2 * j) * f;
    dq(2 * j + 1) = acc(2 * j + 1) * f;
  }
}

// This thread's dQ (fp32, accumulator order) into the staging tile.
template <class Traits, class Fragment>
__device__ __forceinline__ void store_dq_staging(uint32_t dq_smem, Fragment const& acc, int tid) {
  const uint32_t base = dq_smem + dq_thread_base<Traits>(tid);
  constexpr int kPairs = decltype(cute::size(acc))::value / 2;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kPairs; ++j)
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(dq_pair_offset<Traits>(base, j)), "f"(acc(2 * j)),
                 "f"(acc(2 * j + 1)) : "memory");
}
#endif

}  // namespace flashtrain::cuda::sm90
