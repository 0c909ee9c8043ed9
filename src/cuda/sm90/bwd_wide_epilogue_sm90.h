// The dK / dV epilogue of the wide-key-tile backward (bwd_wide_kernel_sm90.h): its accumulators are
// transposed, dK^T and dV^T (D x keys), so each thread's value pairs are adjacent keys, a row of
// the output apart. Written straight to global memory that is a 2-byte store per value, each
// warp store touching 32 rows. Instead both tiles are staged, rounded, in shared memory (K's and
// V's buffers, free once every GEMM has retired) as keys x D rows whose 16-byte chunk c sits at
// c ^ (key % 8) - the warp's 2-byte stores then fall on distinct banks - and copied out 16 bytes a
// thread, consecutive threads on consecutive chunks of a row (rows past the sequence left out, a
// non-finite rounded value raising the guard's flag). When the block's query heads are a part of
// their group (head chunks) the values are added into the fp32 accumulators with scalar atomics
// instead. Once per block, after its whole walk.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../common/numerics_flags.h"
#include "../sm80/bwd_params.h"

namespace flashtrain::cuda::sm90 {

// Keys [0, rows) of this thread's part of a (D x keys) accumulator tile, times `factor`, added
// value by value into the fp32 (keys x D) tile at accum (row stride accum_stride) by scalar
// atomics: the epilogue of a block whose query heads are a part of their group (head chunks).
template <int kDim, int kKeys, class ThrMma, class Acc>
__device__ __forceinline__ void add_kv_tile_t(ThrMma const& thr, Acc const& acc, float factor, int rows, float* accum,
                                              int64_t accum_stride) {
  using namespace cute;
  const Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kDim>, Int<kKeys>>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) {
    const int d = get<0>(coord(i)), key = get<1>(coord(i));
    if (key < rows) atomicAdd(accum + key * accum_stride + d, acc(i) * factor);
  }
}

// Staging offsets. Value i = e + 2 h + 4 c + 4 (N / 8) s of thread tid of the dK^T / dV^T
// accumulator (TiledMmadKV: warpgroup w's slabs s = 0, 1 of 64 rows of D are w and w + 2) holds
// row d = 64 (w + 2 s) + 16 warp + lane / 4 + 8 h of D and key 8 c + 2 (lane % 4) + e. In the
// staging tile (keys x D, 16-bit, kD * 2 bytes a row) its chunk d / 8 = 8 (w + 2 s) + 2 warp + h
// goes to (d / 8) ^ (key % 8) = 8 (w + 2 s) + (((warp ^ lane % 4) << 1) | (h ^ e)): a thread part
// and a constant, as for P and dS (bwd_smem_stores_sm90.h).
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t wide_dkv_staging_offset(int key, int d) {
  return static_cast<uint32_t>(key * Traits::kHeadDim * 2 + (((d / 8) ^ (key % 8)) * 16) + (d % 8) * 2);
}
template <class Traits>
CUTLASS_HOST_DEVICE uint32_t wide_dkv_thread_base(int tid) {
  const int w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, l = lane % 4;
  return static_cast<uint32_t>(2 * l * Traits::kHeadDim * 2 + w * 128 + ((warp ^ l) << 5) + (lane / 4) * 2);
}
template <class Traits>
CUTLASS_HOST_DEVICE constexpr uint32_t wide_dkv_value_offset(int i) {
  constexpr int kColBlocks = Traits::kBlockN / 8;
  const int e = i % 2, h = (i / 2) % 2, c = (i / 4) % kColBlocks, slab = i / (4 * kColBlocks);
  return static_cast<uint32_t>((8 * c + e) * Traits::kHeadDim * 2 + 2 * slab * 128 + ((h ^ e) << 4));
}

#ifdef __CUDACC__
// This thread's dK^T or dV^T values times `factor`, rounded, into the staging tile at `smem`.
template <class Traits, class Acc>
__device__ __forceinline__ void stage_dkv_t(uint32_t smem, Acc const& acc, float factor, int tid) {
  using Element = typename Traits::Element;
  constexpr int kValues = decltype(cute::size(acc))::value;
  const uint32_t base = smem + wide_dkv_thread_base<Traits>(tid);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kValues; ++i) {
    const Element v = static_cast<Element>(acc(i) * factor);
    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(base + wide_dkv_value_offset<Traits>(i)),
                 "h"(reinterpret_cast<const uint16_t&>(v)) : "memory");
  }
}

// Rows [0, rows) of the staging tile at `smem` to `out` (row stride out_stride elements), 16 bytes
// a thread at a time over the consumer threads; returns whether any value is non-finite.
template <class Traits>
__device__ __forceinline__ bool copy_out_dkv(uint32_t smem, typename Traits::Element* out, int64_t out_stride,
                                             int rows, int tid) {
  using Element = typename Traits::Element;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;
  constexpr int kChunks = Traits::kBlockN * kChunksPerRow;
  static_assert(kChunks % Traits::kNumMmaThreads == 0, "whole chunks per thread");
  bool bad = false;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kChunks / Traits::kNumMmaThreads; ++j) {
    const int idx = tid + j * Traits::kNumMmaThreads;
    const int key = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
    if (key < rows) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(smem + wide_dkv_staging_offset<Traits>(key, chunk * 8)));
      *reinterpret_cast<uint4*>(out + key * out_stride + chunk * 8) = v;
      const Element* e = reinterpret_cast<const Element*>(&v);
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < 8; ++k) bad |= !isfinite(static_cast<float>(e[k]));
    }
  }
  return bad;
}
#endif

// dK (times softmax_scale) and dV (times 1 / (1 - p)) of KV tile n0 of head hk, from dK^T / dV^T.
// Every consumer thread calls it, once every GEMM of both warpgroups has retired (the staging
// overwrites K's and V's buffers); `named_barrier` is a barrier id of the consumers.
template <typename Traits, class ThrMma, class AccK, class AccV>
__device__ __forceinline__ void store_dkv_t(const sm80::BwdParams& p, const sm80::SeqGeometry& geo, ThrMma const& thr,
                                            AccK const& acc_dkt, AccV const& acc_dvt, int b, int hk, int n0,
                                            typename Traits::SharedStorage& s, int mma_tid, uint32_t named_barrier) {
  using Element = typename Traits::Element;
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN;
  const int rows = geo.len_k - n0;
  if (p.accumulate_dkv) {
    const int64_t accum_row = static_cast<int64_t>(geo.row_k + n0) * p.heads_k + hk;
    const int64_t accum_stride = static_cast<int64_t>(p.heads_k) * kD;
    add_kv_tile_t<kD, kN>(thr, acc_dkt, p.scale, rows, p.dk_accum + accum_row * kD, accum_stride);
    add_kv_tile_t<kD, kN>(thr, acc_dvt, p.dropout_rescale, rows, p.dv_accum + accum_row * kD, accum_stride);
    return;
  }
  // 16-byte aligned rows: the CUDA backend refuses outputs whose pointer or strides are not
  // multiples of 16 bytes (src/cuda/backend.cu, alignment_reason).
  Element* dk = static_cast<Element*>(p.dk) + geo.k_offset(p.sdk, b, n0, hk);
  Element* dv = static_cast<Element*>(p.dv) + geo.k_offset(p.sdv, b, n0, hk);
  using cutlass::arch::NamedBarrier;
  const uint32_t k_smem = cute::cast_smem_ptr_to_uint(s.k.data());
  const uint32_t v_smem = cute::cast_smem_ptr_to_uint(s.v.data());
  NamedBarrier::sync(Traits::kNumMmaThreads, named_barrier);  // every GEMM reading K and V has retired
  stage_dkv_t<Traits>(k_smem, acc_dkt, p.scale, mma_tid);
  stage_dkv_t<Traits>(v_smem, acc_dvt, p.dropout_rescale, mma_tid);
  NamedBarrier::sync(Traits::kNumMmaThreads, named_barrier);
  bool bad = copy_out_dkv<Traits>(k_smem, dk, p.sdk.seq, rows, mma_tid);
  bad |= copy_out_dkv<Traits>(v_smem, dv, p.sdv.seq, rows, mma_tid);
  raise_nonfinite_flag(&p.numerics->nonfinite, bad);
}

}  // namespace flashtrain::cuda::sm90
