// Where the main backward kernel's results go: the per-step dQ contribution into the fp32 dQ
// accumulator, and the block's final dK / dV (into the output tensors, or into fp32 accumulators
// when the query-head group is split over blocks).
#pragma once
#include <cuda/atomic>
#include <cute/tensor.hpp>

#include "../common/fragment.h"
#include "../common/numerics_flags.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

// g[i] += scale * acc[i] with fp32 atomics for the elements whose row (coord) is < rows. The
// accumulator holds column pairs (i, i + 1) at 8-byte aligned addresses: sm90 adds each pair
// with one vector atomic (red.global.add.v2.f32), halving the atomic traffic.
template <class Gmem, class Coord, class Acc>
__device__ __forceinline__ void add_rows_atomic(Gmem& g, Coord const& coord, Acc const& acc, int rows, float scale) {
  using namespace cute;
  static_assert(decltype(size(acc))::value % 2 == 0, "accumulators come in column pairs");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    if (get<0>(coord(i)) < rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(&g(i)), make_float2(acc(i) * scale, acc(i + 1) * scale));
#else
      atomicAdd(&g(i), acc(i) * scale);
      atomicAdd(&g(i + 1), acc(i + 1) * scale);
#endif
    }
  }
}

// Deterministic mode: KV tiles add into one dQ tile strictly in KV-tile order. Each (batch,
// query head, Q tile) has a semaphore counting the KV tiles that have added; `order` is this KV
// tile's position among those that reach the Q tile. Blocks only wait on lower blockIdx.x
// (launched earlier), so a waiter never holds up its own turn. Whole block calls wait_dq_turn and
// pass_dq_turn; one thread calls the primitives under them (the sm90 backward, whose warpgroups
// take the turn on their own, calls those directly).
__device__ __forceinline__ int* dq_semaphore(const BwdParams& p, int b, int hq, int m_block) {
  return p.dq_sema + (static_cast<int64_t>(b) * p.heads_q + hq) * p.m_blocks + m_block;
}
// One thread: spins until the semaphore reaches `order`. The count only grows, and not past
// `order` before this caller's own turn, so "at least" is "equal" here; sm90 D 256's deterministic
// cluster pairs count two a pair's turn (each block passes half of it on, in either order) and
// wait for twice the turn.
__device__ __forceinline__ void spin_until_dq_turn(int* sema, int order) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> turn(*sema);
  while (turn.load(::cuda::memory_order_acquire) < order) {
  }
}
// One thread: passes the turn on (the caller has made every addition visible first); `steps` 2
// for a pair's block that adds the whole pair's share alone.
__device__ __forceinline__ void release_dq_turn(int* sema, int steps = 1) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> turn(*sema);
  turn.fetch_add(steps, ::cuda::memory_order_release);
}
__device__ __forceinline__ void wait_dq_turn(int* sema, int order) {
  if (threadIdx.x == 0) spin_until_dq_turn(sema, order);
  __syncthreads();
}
__device__ __forceinline__ void pass_dq_turn(int* sema) {
  __threadfence();  // every thread's additions are visible before the turn passes on
  __syncthreads();
  if (threadIdx.x == 0) release_dq_turn(sema);
}

// Adds factor * acc_dq (columns [col0, col0 + kDqChunk) of Q tile m0 of head hq) to dq_accum with
// fp32 atomics, rows beyond the sequence skipped.
template <typename Traits, class ThrMma, class Acc>
__device__ __forceinline__ void add_dq_tile(const BwdParams& p, const SeqGeometry& geo, ThrMma const& thr,
                                            Acc const& acc_dq, int hq, int m0, int col0, float factor) {
  using namespace cute;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kDimQK = Traits::kDimQK;
  constexpr int kChunk = Traits::kDqChunk;
  float* base = p.dq_accum + (static_cast<int64_t>(geo.row_q + m0) * p.heads_q + hq) * kDimQK + col0;
  Tensor gdQ = make_tensor(make_gmem_ptr(base), Shape<Int<kBlockM>, Int<kChunk>>{},
                           make_stride(static_cast<int64_t>(p.heads_q) * kDimQK, _1{}));
  Tensor tdQgdQ = thr.partition_C(gdQ);
  const Tensor tdQcdQ = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kChunk>>{}));
  const int rows = geo.len_q - m0;
  add_rows_atomic(tdQgdQ, tdQcdQ, acc_dq, rows, factor);
}

// add_dq_tile of scale * ds_unscale * acc_dq. ds_unscale is the power of two the safe pass scaled
// dS down by (1 in the normal pass).
template <typename Traits, class ThrMma, class Acc>
__device__ __forceinline__ void accumulate_dq(const BwdParams& p, const SeqGeometry& geo, ThrMma const& thr,
                                              Acc const& acc_dq, int hq, int m0, int col0, float ds_unscale) {
  add_dq_tile<Traits>(p, geo, thr, acc_dq, hq, m0, col0, p.scale * ds_unscale);
}

// Writes rows [0, rows) of a (kRows x kCols) fp32 accumulator tile: rounded into a 16-bit output
// tensor at `out` (row stride out_stride), or added with fp32 atomics at `accum` (row stride
// accum_stride) when the tile is a partial sum over part of a query-head group. A rounded value
// that is non-finite raises the guard's flag in *nonfinite (unless null); the postprocess checks
// the accumulated ones.
template <typename Element, int kRows, int kCols, class ThrMma, class Acc>
__device__ __forceinline__ void store_kv_tile(ThrMma const& thr, Acc const& acc, int rows, bool atomic,
                                              Element* out, int64_t out_stride, float* accum,
                                              int64_t accum_stride, uint32_t* nonfinite) {
  using namespace cute;
  const Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
  if (atomic) {
    Tensor g = thr.partition_C(make_tensor(make_gmem_ptr(accum), Shape<Int<kRows>, Int<kCols>>{},
                                           make_stride(accum_stride, _1{})));
    add_rows_atomic(g, coord, acc, rows, 1.0f);
  } else {
    Tensor g = thr.partition_C(make_tensor(make_gmem_ptr(out), Shape<Int<kRows>, Int<kCols>>{},
                                           make_stride(out_stride, _1{})));
    const Tensor rounded = convert_fragment<Element>(acc);
    bool bad = false;
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      if (get<0>(coord(i)) < rows) {
        g(i) = rounded(i);
        bad |= !isfinite(static_cast<float>(rounded(i)));
      }
    }
    if (nonfinite != nullptr) raise_nonfinite_flag(nonfinite, bad);
  }
}

// dK (times softmax_scale: S was scale * Q K^T, and times ds_unscale, the safe pass's power of two)
// and dV (times 1 / (1 - p): it accumulated P * keep) of KV tile n0 of head hk.
template <typename Traits, class ThrMma, class AccK, class AccV>
__device__ __forceinline__ void store_dkv(const BwdParams& p, const SeqGeometry& geo, ThrMma const& thr,
                                          AccK& acc_dk, AccV& acc_dv, int b, int hk, int n0, int rows,
                                          float ds_unscale, uint32_t* nonfinite) {
  using Element = typename Traits::Element;
  constexpr int kBlockN = Traits::kBlockN;
  const float dk_scale = p.scale * ds_unscale;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc_dk); ++i) acc_dk(i) *= dk_scale;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc_dv); ++i) acc_dv(i) *= p.dropout_rescale;
  const int64_t accum_row = static_cast<int64_t>(geo.row_k + n0) * p.heads_k + hk;
  float* dk_accum = p.accumulate_dkv ? p.dk_accum + accum_row * Traits::kDimQK : nullptr;
  float* dv_accum = p.accumulate_dkv ? p.dv_accum + accum_row * Traits::kDimV : nullptr;
  store_kv_tile<Element, kBlockN, Traits::kDimQK>(
      thr, acc_dk, rows, p.accumulate_dkv, static_cast<Element*>(p.dk) + geo.k_offset(p.sdk, b, n0, hk), p.sdk.seq,
      dk_accum, static_cast<int64_t>(p.heads_k) * Traits::kDimQK, nonfinite);
  store_kv_tile<Element, kBlockN, Traits::kDimV>(
      thr, acc_dv, rows, p.accumulate_dkv, static_cast<Element*>(p.dv) + geo.k_offset(p.sdv, b, n0, hk), p.sdv.seq,
      dv_accum, static_cast<int64_t>(p.heads_k) * Traits::kDimV, nonfinite);
}

}  // namespace flashtrain::cuda::sm80
