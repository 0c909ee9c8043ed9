// CPU forward: tiled online softmax (fp32 running max and sum), one task per
// (batch, head, query tile); memory is O(tile) per task, never O(Sq * Sk).
#include <algorithm>
#include <cmath>
#include <vector>

#include "../api/backends.h"
#include "telemetry.h"
#include "pack.h"
#include "tiles.h"

namespace flashtrain::cpu {

void forward(const Problem& p) {
  const int64_t dqk = p.dim_qk, dv = p.dim_v, ldq = padded(dqk), ldv = padded(dv);
  const int64_t m_tiles = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t tasks = p.batch * p.heads_q * m_tiles;
  const KeyTiles ks(p, KeyTiles::kKt | KeyTiles::kV);
  Telemetry total;
#pragma omp parallel
  {
    std::vector<float> q(kBlockM * ldq);
    std::vector<float> s(kBlockM * kBlockN), acc(kBlockM * ldv), row_max(kBlockM), row_sum(kBlockM);
    Telemetry local;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t mt = task % m_tiles, bh = task / m_tiles;
      const HeadContext c = head_context(p, bh / p.heads_q, bh % p.heads_q);
      const int64_t row0 = mt * kBlockM;
      if (row0 >= c.seqlen_q) continue;
      const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
      load_tile(p.q, element_offset(p, p.sq, true, c.b, row0, c.h), p.sq.seq, m, dqk, ldq, q.data());
      scale_tile(q.data(), m, ldq, c.scale);
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(row_max.begin(), row_max.end(), kNegInf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      int64_t col_begin, col_end;
      visible_cols(c.mask, row0, row0 + m, &col_begin, &col_end);
      for (int64_t col0 = col_begin - col_begin % kBlockN; col0 < col_end; col0 += kBlockN) {
        const int64_t n = std::min(kBlockN, c.seqlen_k - col0);
        const int64_t kid = ks.id(c.b, c.kh, col0);
        score_block(c, q.data(), ldq, ks.kt_tile(kid), m, n, dqk, row0, col0, s.data(), nullptr);
        if (p.report) local.scores(s.data(), m * kBlockN);
        for (int64_t i = 0; i < m; ++i) {
          float* srow = &s[i * kBlockN];
          // NaN-propagating maxima: a NaN input must reach this row's out and lse
          // (NonFiniteInputs::kPropagate), never pass for a fully masked row.
          const float tile_max = row_max_nan(srow);
          const float new_max = nan_max(row_max[i], tile_max);
          if (new_max == kNegInf) {  // nothing visible in this row yet: contributes nothing
            std::fill(srow, srow + kBlockN, 0.0f);
            continue;
          }
          const float correction = std::exp(row_max[i] - new_max);
          exp_shifted(srow, kBlockN, new_max);
          row_sum[i] = row_sum[i] * correction + row_total(srow);
          row_max[i] = new_max;
          if (correction != 1.0f) scale_tile(&acc[i * ldv], 1, ldv, correction);
        }
        if (p.dropout_p > 0.0) apply_dropout(p, c, row0, col0, m, n, s.data());
        tile_gemm(acc.data(), ldv, s.data(), kBlockN, 1, ks.v_tile(kid), ldv, m, n, ldv, true);
      }
      for (int64_t i = 0; i < m; ++i) {
        const bool empty = row_sum[i] == 0.0f;  // fully masked row: out 0, lse -inf
        const float inv = empty ? 0.0f : 1.0f / row_sum[i];
        scale_tile(&acc[i * ldv], 1, ldv, inv);
        const float lse = empty ? kNegInf : row_max[i] + std::log(row_sum[i]);
        static_cast<float*>(p.lse.data)[lse_offset(p, c.b, row0 + i, c.h)] = lse;
        if (p.report) local.row(lse);
      }
      store_tile(p.out, element_offset(p, p.so, true, c.b, row0, c.h), p.so.seq, m, dv, ldv, acc.data());
    }
    if (p.report) {
#pragma omp critical
      total.merge(local);
    }
  }
  if (p.report) total.into_forward(*p.report);
}

}  // namespace flashtrain::cpu
