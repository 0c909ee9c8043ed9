// CPU recompute-backward. P is rebuilt from q, k and the saved lse; D = rowsum(dO * O) in fp32
// (computed while packing the query tiles, pack.h).
// Two passes instead of atomics: pass A owns dK/dV of one key tile (looping over the query
// heads of its KV head and all query tiles), pass B owns dQ of one query tile. Each output
// element is written by exactly one task in a fixed order, so gradients are bitwise
// deterministic for any thread count, at the price of computing S and dP twice.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../api/backends.h"
#include "telemetry.h"
#include "pack.h"
#include "tiles.h"

namespace flashtrain::cpu {
namespace {

// Per-thread [kBlockM][kBlockN] tiles of one (query tile, key tile) pair.
struct Scratch {
  std::vector<float> s, tanh_s, keep, dp;
  Scratch() : s(kBlockM * kBlockN), tanh_s(kBlockM * kBlockN), keep(kBlockM * kBlockN), dp(kBlockM * kBlockN) {}
};

// For query tile qid (rows row0.., m of them) and key tile kid (cols col0.., n of them), all
// [m][kBlockN]: w.s <- P (dropped and rescaled when dropout is on), w.dp <- dS (softcap chain
// rule applied, softmax scale not yet applied).
void probs_and_ds(const Problem& p, const HeadContext& c, const QueryTiles& qs, int64_t qid,
                  const KeyTiles& ks, int64_t kid, int64_t row0, int64_t col0, int64_t m, int64_t n,
                  Scratch& w) {
  score_block(c, qs.q_tile(qid), qs.ldq, ks.kt_tile(kid), m, n, p.dim_qk, row0, col0, w.s.data(),
              c.softcap > 0.0f ? w.tanh_s.data() : nullptr);
  const float* lse = qs.lse_tile(qid);
  for (int64_t i = 0; i < m; ++i) {
    float* prow = &w.s[i * kBlockN];
    if (lse[i] == kNegInf)  // the row sees no key: P = 0
      std::fill(prow, prow + kBlockN, 0.0f);
    else
      exp_shifted(prow, kBlockN, lse[i]);
  }
  const bool dropout = p.dropout_p > 0.0;
  if (dropout) {
    std::fill(w.keep.begin(), w.keep.begin() + m * kBlockN, 1.0f);
    apply_dropout(p, c, row0, col0, m, n, w.keep.data());
  }
  tile_gemm(w.dp.data(), kBlockN, qs.dout_tile(qid), qs.ldv, 1, ks.vt_tile(kid), kBlockN, m, p.dim_v,
            kBlockN, false);
  const bool softcap = c.softcap > 0.0f;
  const Vec one = Vec::set1(1.0f);
  const float* dsum = qs.d_tile(qid);
  for (int64_t e0 = 0; e0 < m * kBlockN; e0 += kBlockN) {
    const Vec di = Vec::set1(dsum[e0 / kBlockN]);
    for (int64_t e = e0; e < e0 + kBlockN; e += kLanes) {
      Vec dpj = Vec::load(&w.dp[e]);
      if (dropout) dpj = dpj * Vec::load(&w.keep[e]);
      Vec ds = Vec::load(&w.s[e]) * (dpj - di);
      if (softcap) {
        const Vec t = Vec::load(&w.tanh_s[e]);
        ds = ds * (one - t * t);
      }
      ds.store(&w.dp[e]);
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
  const int64_t dqk = p.dim_qk, dv = p.dim_v, ldq = padded(dqk), ldv = padded(dv);
  const float scale = static_cast<float>(p.scale);
  const QueryTiles qs(p);
  const KeyTiles ks(p, KeyTiles::kKt | KeyTiles::kK | KeyTiles::kVt);

  // Pass A: dK and dV of one key tile of one KV head.
#pragma omp parallel
  {
    Scratch w;
    std::vector<float> dk(kBlockN * ldq), dvt(kBlockN * ldv);
#pragma omp for schedule(dynamic, 1)
    for (int64_t kid = 0; kid < ks.grid.size() * p.heads_k; ++kid) {
      const int64_t t = kid / p.heads_k, kh = kid % p.heads_k;
      const int64_t b = ks.grid.batch[t], col0 = ks.grid.row0[t];
      const int64_t n = std::min(kBlockN, p.seqlen_k(b) - col0);
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dvt.begin(), dvt.end(), 0.0f);
      for (int64_t h = kh * p.group(); h < (kh + 1) * p.group(); ++h) {
        const HeadContext c = head_context(p, b, h);
        for (int64_t row0 = 0; row0 < c.seqlen_q; row0 += kBlockM) {
          const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
          if (!tiles_meet(c.mask, row0, m, col0, n)) continue;
          const int64_t qid = qs.id(b, h, row0);
          probs_and_ds(p, c, qs, qid, ks, kid, row0, col0, m, n, w);
          // dV += P_dropped^T dO;  dK += dS^T (scale Q).
          tile_gemm(dvt.data(), ldv, w.s.data(), 1, kBlockN, qs.dout_tile(qid), ldv, n, m, ldv, true);
          tile_gemm(dk.data(), ldq, w.dp.data(), 1, kBlockN, qs.q_tile(qid), ldq, n, m, ldq, true);
        }
      }
      store_tile(p.dk, element_offset(p, p.sdk, false, b, col0, kh), p.sdk.seq, n, dqk, ldq, dk.data());
      store_tile(p.dv, element_offset(p, p.sdv, false, b, col0, kh), p.sdv.seq, n, dv, ldv, dvt.data());
    }
  }

  // Pass B: dQ of one query tile of one query head.
  Telemetry total;
#pragma omp parallel
  {
    Scratch w;
    std::vector<float> dq(kBlockM * ldq);
    Telemetry local;
#pragma omp for schedule(dynamic, 1)
    for (int64_t qid = 0; qid < qs.grid.size() * p.heads_q; ++qid) {
      const int64_t t = qid / p.heads_q;
      const HeadContext c = head_context(p, qs.grid.batch[t], qid % p.heads_q);
      const int64_t row0 = qs.grid.row0[t];
      const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
      std::fill(dq.begin(), dq.end(), 0.0f);
      int64_t col_begin, col_end;
      visible_cols(c.mask, row0, row0 + m, &col_begin, &col_end);
      for (int64_t col0 = col_begin - col_begin % kBlockN; col0 < col_end; col0 += kBlockN) {
        const int64_t n = std::min(kBlockN, c.seqlen_k - col0);
        const int64_t kid = ks.id(c.b, c.kh, col0);
        probs_and_ds(p, c, qs, qid, ks, kid, row0, col0, m, n, w);
        if (p.report) local.ds(w.dp.data(), m * kBlockN);
        tile_gemm(dq.data(), ldq, w.dp.data(), kBlockN, 1, ks.k_tile(kid), ldq, m, n, ldq, true);
      }
      scale_tile(dq.data(), m, ldq, scale);
      store_tile(p.dq, element_offset(p, p.sdq, true, c.b, row0, c.h), p.sdq.seq, m, dqk, ldq, dq.data());
    }
    if (p.report) {
#pragma omp critical
      total.merge(local);
    }
  }
  if (p.report) total.into_backward(*p.report);
}

}  // namespace flashtrain::cpu
