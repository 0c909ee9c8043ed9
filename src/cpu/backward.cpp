// CPU recompute-backward. P is rebuilt from q, k and the saved lse; D = rowsum(dO * O) in fp32.
// Two passes instead of atomics: pass A owns dK/dV of one key tile (looping over the query
// heads of its KV head and all query tiles), pass B owns dQ of one query tile. Each output
// element is written by exactly one task in a fixed order, so gradients are bitwise
// deterministic for any thread count, at the price of computing S and dP twice.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../api/backends.h"
#include "telemetry.h"
#include "tiles.h"

namespace flashtrain::cpu {
namespace {

// Row index of (b, i) in the per-(head, row) arrays D: dense rows are b * Sq + i.
int64_t global_row(const Problem& p, int64_t b, int64_t i) {
  return p.varlen ? p.seq_start_q(b) + i : b * p.max_seqlen_q + i;
}
int64_t rows_total(const Problem& p) { return p.varlen ? p.total_q : p.batch * p.max_seqlen_q; }

struct Scratch {
  std::vector<float> q, dout, k, kt, v, vt, s, tanh_s, keep, dp, lse, d;
  Scratch(int64_t dqk, int64_t dv)
      : q(kBlockM * dqk), dout(kBlockM * dv), k(kBlockN * dqk), kt(dqk * kBlockN), v(kBlockN * dv),
        vt(dv * kBlockN), s(kBlockM * kBlockN), tanh_s(kBlockM * kBlockN), keep(kBlockM * kBlockN),
        dp(kBlockM * kBlockN), lse(kBlockM), d(kBlockM) {}
};

void load_query_tile(const Problem& p, const HeadContext& c, int64_t row0, int64_t m,
                     const std::vector<float>& dsum, Scratch& w) {
  load_tile(p.q, element_offset(p, p.sq, true, c.b, row0, c.h), p.sq.seq, m, p.dim_qk, w.q.data());
  load_tile(p.dout, element_offset(p, p.sdo, true, c.b, row0, c.h), p.sdo.seq, m, p.dim_v, w.dout.data());
  const float* lse = static_cast<const float*>(p.lse.data);
  for (int64_t i = 0; i < m; ++i) {
    w.lse[i] = lse[lse_offset(p, c.b, row0 + i, c.h)];
    w.d[i] = dsum[c.h * rows_total(p) + global_row(p, c.b, row0 + i)];
  }
}

void load_key_tile(const Problem& p, const HeadContext& c, int64_t col0, int64_t n, Scratch& w) {
  load_tile(p.k, element_offset(p, p.sk, false, c.b, col0, c.kh), p.sk.seq, n, p.dim_qk, w.k.data());
  load_tile(p.v, element_offset(p, p.sv, false, c.b, col0, c.kh), p.sv.seq, n, p.dim_v, w.v.data());
  transpose_padded(w.k.data(), n, p.dim_qk, w.kt.data());
  transpose_padded(w.v.data(), n, p.dim_v, w.vt.data());
}

// For the loaded (query tile, key tile), all [m][kBlockN]: w.s <- P (undropped), w.keep <-
// dropout keep-scale, w.dp <- dS (softcap chain rule applied, softmax scale not yet applied).
void probs_and_ds(const Problem& p, const HeadContext& c, int64_t row0, int64_t col0, int64_t m,
                  int64_t n, Scratch& w) {
  score_block(c, w.q.data(), w.kt.data(), m, n, p.dim_qk, row0, col0, w.s.data(),
              c.softcap > 0.0f ? w.tanh_s.data() : nullptr);
  for (int64_t i = 0; i < m; ++i) {
    float* prow = &w.s[i * kBlockN];
    if (w.lse[i] == kNegInf)  // the row sees no key: P = 0
      std::fill(prow, prow + kBlockN, 0.0f);
    else
      exp_shifted(prow, kBlockN, w.lse[i]);
  }
  const bool dropout = p.dropout_p > 0.0;
  if (dropout) {
    std::fill(w.keep.begin(), w.keep.begin() + m * kBlockN, 1.0f);
    apply_dropout(p, c, row0, col0, m, n, w.keep.data());
  }
  gemm_rows_by_tile(w.dout.data(), w.vt.data(), m, p.dim_v, 1.0f, w.dp.data());
  for (int64_t i = 0; i < m; ++i) {
    const float* prow = &w.s[i * kBlockN];
    float* dprow = &w.dp[i * kBlockN];
    const float di = w.d[i];
    for (int64_t j = 0; j < kBlockN; ++j) {
      const float dpj = dropout ? dprow[j] * w.keep[i * kBlockN + j] : dprow[j];
      float ds = prow[j] * (dpj - di);
      if (c.softcap > 0.0f) {
        const float t = w.tanh_s[i * kBlockN + j];
        ds *= 1.0f - t * t;
      }
      dprow[j] = ds;
    }
  }
  if (dropout)  // from here on w.s holds the dropped, rescaled P that multiplies V
    for (int64_t e = 0; e < m * kBlockN; ++e) w.s[e] *= w.keep[e];
}

bool tiles_meet(const MaskSpec& mask, int64_t row0, int64_t m, int64_t col0, int64_t n) {
  int64_t b, e;
  visible_cols(mask, row0, row0 + m, &b, &e);
  return b < col0 + n && e > col0 && b < e;
}

}  // namespace

void backward(const Problem& p) {
  const int64_t dqk = p.dim_qk, dv = p.dim_v;
  const int64_t m_tiles = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t n_tiles = (p.max_seqlen_k + kBlockN - 1) / kBlockN;
  const float scale = static_cast<float>(p.scale);

  // Preprocess: D = rowsum(dO * O), fp32, per (query head, row).
  std::vector<float> dsum(p.heads_q * rows_total(p), 0.0f);
#pragma omp parallel
  {
    std::vector<float> o(kBlockM * dv), g(kBlockM * dv);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < p.batch * p.heads_q * m_tiles; ++task) {
      const int64_t mt = task % m_tiles, bh = task / m_tiles, b = bh / p.heads_q, h = bh % p.heads_q;
      const int64_t row0 = mt * kBlockM;
      if (row0 >= p.seqlen_q(b)) continue;
      const int64_t m = std::min(kBlockM, p.seqlen_q(b) - row0);
      load_tile(p.out, element_offset(p, p.so, true, b, row0, h), p.so.seq, m, dv, o.data());
      load_tile(p.dout, element_offset(p, p.sdo, true, b, row0, h), p.sdo.seq, m, dv, g.data());
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t d = 0; d < dv; ++d) acc += o[i * dv + d] * g[i * dv + d];
        dsum[h * rows_total(p) + global_row(p, b, row0 + i)] = acc;
      }
    }
  }

  // Pass A: dK and dV of one key tile of one KV head.
#pragma omp parallel
  {
    Scratch w(dqk, dv);
    std::vector<float> dk(kBlockN * dqk), dvt(kBlockN * dv);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < p.batch * p.heads_k * n_tiles; ++task) {
      const int64_t nt = task % n_tiles, bkh = task / n_tiles;
      const int64_t b = bkh / p.heads_k, kh = bkh % p.heads_k;
      const int64_t col0 = nt * kBlockN;
      if (col0 >= p.seqlen_k(b)) continue;
      const int64_t n = std::min(kBlockN, p.seqlen_k(b) - col0);
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dvt.begin(), dvt.end(), 0.0f);
      for (int64_t h = kh * p.group(); h < (kh + 1) * p.group(); ++h) {
        const HeadContext c = head_context(p, b, h);
        if (h == kh * p.group()) load_key_tile(p, c, col0, n, w);
        for (int64_t row0 = 0; row0 < c.seqlen_q; row0 += kBlockM) {
          const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
          if (!tiles_meet(c.mask, row0, m, col0, n)) continue;
          load_query_tile(p, c, row0, m, dsum, w);
          probs_and_ds(p, c, row0, col0, m, n, w);
          // dV += P_dropped^T dO;  dK += dS^T Q (scale applied once at the end).
          accumulate_products(dvt.data(), w.s.data(), 1, kBlockN, w.dout.data(), n, m, dv);
          accumulate_products(dk.data(), w.dp.data(), 1, kBlockN, w.q.data(), n, m, dqk);
        }
      }
      for (float& x : dk) x *= scale;
      store_tile(p.dk, element_offset(p, p.sdk, false, b, col0, kh), p.sdk.seq, n, dqk, dk.data());
      store_tile(p.dv, element_offset(p, p.sdv, false, b, col0, kh), p.sdv.seq, n, dv, dvt.data());
    }
  }

  // Pass B: dQ of one query tile of one query head.
  Telemetry total;
#pragma omp parallel
  {
    Scratch w(dqk, dv);
    std::vector<float> dq(kBlockM * dqk);
    Telemetry local;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < p.batch * p.heads_q * m_tiles; ++task) {
      const int64_t mt = task % m_tiles, bh = task / m_tiles;
      const HeadContext c = head_context(p, bh / p.heads_q, bh % p.heads_q);
      const int64_t row0 = mt * kBlockM;
      if (row0 >= c.seqlen_q) continue;
      const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
      std::fill(dq.begin(), dq.end(), 0.0f);
      load_query_tile(p, c, row0, m, dsum, w);
      int64_t col_begin, col_end;
      visible_cols(c.mask, row0, row0 + m, &col_begin, &col_end);
      for (int64_t col0 = col_begin - col_begin % kBlockN; col0 < col_end; col0 += kBlockN) {
        const int64_t n = std::min(kBlockN, c.seqlen_k - col0);
        load_key_tile(p, c, col0, n, w);
        probs_and_ds(p, c, row0, col0, m, n, w);
        if (p.report) local.ds(w.dp.data(), m * kBlockN);
        accumulate_products(dq.data(), w.dp.data(), kBlockN, 1, w.k.data(), m, n, dqk);
      }
      for (float& x : dq) x *= scale;
      store_tile(p.dq, element_offset(p, p.sdq, true, c.b, row0, c.h), p.sdq.seq, m, dqk, dq.data());
    }
    if (p.report) {
#pragma omp critical
      total.merge(local);
    }
  }
  if (p.report) total.into_backward(*p.report);
}

}  // namespace flashtrain::cpu
