// D_i = sum_j P_ij * dL/dP_ij of one query row, from q, k, v, dO and lse in fp32: the backward's
// correction term without the rounding of `out` that D = rowsum(dO * O) carries (O is stored in
// the input dtype; with a large dO that rounding dominates the dQ / dK error: issue #5, where
// fp16 `out` puts ~1e4 of error into a dK of 6.5e4). dL/dP_ij = dO_i . v_j, times keep_ij / (1 - p)
// with dropout. CuTe-free and host-callable, so tests/cpp checks it against the float64 reference
// on the CPU; src/cuda/sm80/bwd_exact_dsum.h runs it on the GPU (a warp per row, keys over lanes).
#pragma once
#include <cmath>
#include <cstdint>

#include "../../common/host_device.h"
#include "../../common/mask.h"
#include "../../common/philox.h"

namespace flashtrain::cuda {

struct ExactDsumRow {
  int64_t i;           // row inside its sequence
  float scale;         // softmax scale
  float softcap;       // 0 = off
  float alibi_slope;   // 0 = off
  float lse;           // natural log; -inf for a row that sees no key
  bool dropout;
  uint64_t seed, offset;
  uint32_t bh;         // b * Hq + h, the Philox stream of the row
  uint32_t threshold;  // kept iff the Philox word >= threshold
  float dropout_rescale;
};

// The share of keys j = col_begin + first, + step, ... of row r.i (all of them with first 0 and
// step 1). q / dout: the row's dim_qk / dim_v elements; k / v: row j at k + j * k_stride.
template <typename Element>
FT_HOST_DEVICE float exact_row_dsum(const ExactDsumRow& r, const MaskSpec& mask, const Element* q,
                                    const Element* dout, const Element* k, int64_t k_stride,
                                    const Element* v, int64_t v_stride, int dim_qk, int dim_v, int first,
                                    int step) {
  if (!(r.lse > -INFINITY)) return 0.0f;  // no visible key: P = 0
  float sum = 0.0f;
  const int64_t end = mask.col_end(r.i);
  for (int64_t j = mask.col_begin(r.i) + first; j < end; j += step) {
    if (r.dropout &&
        !philox_keep(r.seed, r.offset, r.bh, static_cast<uint32_t>(r.i), static_cast<uint32_t>(j), r.threshold))
      continue;  // dL/dP of a dropped element is 0
    float s = 0.0f;
    for (int d = 0; d < dim_qk; ++d) s += static_cast<float>(q[d]) * static_cast<float>(k[j * k_stride + d]);
    s = transform_score(s * r.scale, r.softcap, r.alibi_slope, r.i, j, mask.diag);
    float dp = 0.0f;
    for (int d = 0; d < dim_v; ++d) dp += static_cast<float>(dout[d]) * static_cast<float>(v[j * v_stride + d]);
    sum += expf(s - r.lse) * dp;
  }
  return r.dropout ? sum * r.dropout_rescale : sum;
}

}  // namespace flashtrain::cuda
