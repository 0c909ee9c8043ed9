// The dK / dV epilogue of the wide-key-tile backward (bwd_wide_kernel_sm90.h): its accumulators are
// transposed, dK^T and dV^T (D x keys), so each thread's value pairs are adjacent keys, a row of
// the output apart. Each value goes out on its own: rounded into the 16-bit output (rows past the
// sequence left out, a non-finite rounded value raising the guard's flag), or, when the block's
// query heads are a part of their group (head chunks), added into the fp32 accumulators with
// scalar atomics. Once per block, after its whole walk.
#pragma once
#include <cute/tensor.hpp>

#include "../common/numerics_flags.h"
#include "../sm80/bwd_params.h"

namespace flashtrain::cuda::sm90 {

// Keys [0, rows) of this thread's part of a (D x keys) accumulator tile, times `factor`, into the
// (keys x D) tile at out (row stride out_stride) or, `atomic`, added at accum (row stride
// accum_stride).
template <typename Element, int kDim, int kKeys, class ThrMma, class Acc>
__device__ __forceinline__ void store_kv_tile_t(ThrMma const& thr, Acc const& acc, float factor, int rows,
                                                bool atomic, Element* out, int64_t out_stride, float* accum,
                                                int64_t accum_stride, uint32_t* nonfinite) {
  using namespace cute;
  const Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kDim>, Int<kKeys>>{}));
  if (atomic) {
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      const int d = get<0>(coord(i)), key = get<1>(coord(i));
      if (key < rows) atomicAdd(accum + key * accum_stride + d, acc(i) * factor);
    }
    return;
  }
  bool bad = false;
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) {
    const int d = get<0>(coord(i)), key = get<1>(coord(i));
    if (key < rows) {
      const Element rounded = static_cast<Element>(acc(i) * factor);
      out[key * out_stride + d] = rounded;
      bad |= !isfinite(static_cast<float>(rounded));
    }
  }
  if (nonfinite != nullptr) raise_nonfinite_flag(nonfinite, bad);
}

// dK (times softmax_scale) and dV (times 1 / (1 - p)) of KV tile n0 of head hk, from dK^T / dV^T.
template <typename Traits, class ThrMma, class AccK, class AccV>
__device__ __forceinline__ void store_dkv_t(const sm80::BwdParams& p, const sm80::SeqGeometry& geo, ThrMma const& thr,
                                            AccK const& acc_dkt, AccV const& acc_dvt, int b, int hk, int n0) {
  using Element = typename Traits::Element;
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN;
  const int rows = geo.len_k - n0;
  const int64_t accum_row = static_cast<int64_t>(geo.row_k + n0) * p.heads_k + hk;
  const int64_t accum_stride = static_cast<int64_t>(p.heads_k) * kD;
  float* dk_accum = p.accumulate_dkv ? p.dk_accum + accum_row * kD : nullptr;
  float* dv_accum = p.accumulate_dkv ? p.dv_accum + accum_row * kD : nullptr;
  store_kv_tile_t<Element, kD, kN>(thr, acc_dkt, p.scale, rows, p.accumulate_dkv,
                                   static_cast<Element*>(p.dk) + geo.k_offset(p.sdk, b, n0, hk), p.sdk.seq, dk_accum,
                                   accum_stride, &p.numerics->nonfinite);
  store_kv_tile_t<Element, kD, kN>(thr, acc_dvt, p.dropout_rescale, rows, p.accumulate_dkv,
                                   static_cast<Element*>(p.dv) + geo.k_offset(p.sdv, b, n0, hk), p.sdv.seq, dv_accum,
                                   accum_stride, &p.numerics->nonfinite);
}

}  // namespace flashtrain::cuda::sm90
