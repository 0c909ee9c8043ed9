// CPU forward: tiled online softmax (fp32 running max and sum), one task per
// (batch, head, query tile); memory is O(tile) per task, never O(Sq * Sk).
// The two tile products run in fp32 (gemm.h), or, for bf16 inputs with FLASHTRAIN_CPU_AMX=1 on
// a CPU with AMX, as bf16 tile products with fp32 accumulation (amx.h; opt-in until verified on
// an AMX host).
#include <algorithm>
#include <cmath>
#include <vector>

#include "../api/backends.h"
#include "amx.h"
#include "telemetry.h"
#include "pack.h"
#include "tiles.h"

namespace flashtrain::cpu {
namespace {

// The AMX path, like the GPU kernels: bf16 inputs only (fp32 never), with P rounded as
// Precision::kDefault says; kHigh keeps the fp32 products.
AmxMode forward_amx_mode(const Problem& p) {
  if (p.q.dtype != DType::kBFloat16 || p.precision != Precision::kDefault) return AmxMode::kOff;
  return amx_mode();
}

// One thread's bf16 A operands of the AMX products. q [kBlockM][kq] holds the query rows as
// stored, unscaled: the softmax scale multiplies the fp32 products instead, so S = scale * (Q K^T)
// with exact bf16 products summed in fp32. pmat [kBlockM][kBlockN] is P rounded to bf16 before
// P V (Precision::kDefault), while the row sums keep the fp32 P, as on the GPU. Rows past the
// tile's m are zero, so the full-tile products add nothing from them. In AmxMode::kEmulated the
// same operands go through EmulatedTiles and scalar rounding instead of the instructions.
struct AmxOperands {
  bool emulated;
  int64_t kq;
  std::vector<uint16_t> q, pmat;
  EmulatedTiles emulator;

  AmxOperands(AmxMode mode, int64_t dim_qk)
      : emulated(mode == AmxMode::kEmulated), kq(amx_k_padded(dim_qk)),
        q(mode != AmxMode::kOff ? kBlockM * kq : 0), pmat(mode != AmxMode::kOff ? kBlockM * kBlockN : 0) {}

  void load_q(const Problem& p, const HeadContext& c, int64_t row0, int64_t m) {
    const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + element_offset(p, p.sq, true, c.b, row0, c.h);
    for (int64_t r = 0; r < kBlockM; ++r) {
      uint16_t* dst = q.data() + r * kq;
      const int64_t width = r < m ? p.dim_qk : 0;
      std::copy(src + r * p.sq.seq, src + r * p.sq.seq + width, dst);
      std::fill(dst + width, dst + kq, uint16_t{0});
    }
  }

  void gemm(float* c, int64_t ldc, bool accumulate, const uint16_t* a, int64_t lda, const uint16_t* b,
            int64_t ldb, int64_t k_pad, int64_t ncols) {
    if (emulated) amx_gemm(emulator, c, ldc, accumulate, a, lda, b, ldb, kBlockM, k_pad, ncols);
    else amx_gemm_tiles(c, ldc, accumulate, a, lda, b, ldb, kBlockM, k_pad, ncols);
  }

  void scores(const HeadContext& c, const uint16_t* kt_vnni, int64_t m, int64_t n, int64_t row0,
              int64_t col0, float* s) {
    gemm(s, kBlockN, false, q.data(), kq, kt_vnni, 2 * kBlockN, kq, kBlockN);
    scale_tile(s, m, kBlockN, c.scale);
    finish_scores(c, m, n, row0, col0, s, nullptr);
  }

  void accumulate_pv(const float* s, int64_t m, const uint16_t* v_vnni, int64_t ldv, float* acc) {
    if (emulated) std::transform(s, s + m * kBlockN, pmat.begin(), float_to_bf16);
    else round_to_bf16_avx512(s, m * kBlockN, pmat.data());
    std::fill(pmat.begin() + m * kBlockN, pmat.end(), uint16_t{0});
    gemm(acc, ldv, true, pmat.data(), kBlockN, v_vnni, 2 * ldv, kBlockN, ldv);
  }
};

static_assert(kBlockM % kAmxBlockRows == 0 && kBlockN % kAmxK == 0 && kBlockN % kAmxCols == 0,
              "query and key tiles are whole AMX blocks");

}  // namespace

void forward(const Problem& p) {
  const int64_t dqk = p.dim_qk, dv = p.dim_v, ldq = padded(dqk), ldv = padded(dv);
  const int64_t m_tiles = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t tasks = p.batch * p.heads_q * m_tiles;
  const AmxMode amx_path = forward_amx_mode(p);
  const bool amx = amx_path != AmxMode::kOff;
  const KeyTiles ks(p, amx ? KeyTiles::kKtVnni | KeyTiles::kVVnni : KeyTiles::kKt | KeyTiles::kV);
  Telemetry total;
#pragma omp parallel
  {
    std::vector<float> q(kBlockM * ldq);
    std::vector<float> s(kBlockM * kBlockN), acc(kBlockM * ldv), row_max(kBlockM), row_sum(kBlockM);
    Telemetry local;
    const AmxThread amx_thread(amx_path == AmxMode::kHardware);
    AmxOperands amx_ops(amx_path, dqk);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t mt = task % m_tiles, bh = task / m_tiles;
      const HeadContext c = head_context(p, bh / p.heads_q, bh % p.heads_q);
      const int64_t row0 = mt * kBlockM;
      if (row0 >= c.seqlen_q) continue;
      const int64_t m = std::min(kBlockM, c.seqlen_q - row0);
      if (amx) {
        amx_ops.load_q(p, c, row0, m);
      } else {
        load_tile(p.q, element_offset(p, p.sq, true, c.b, row0, c.h), p.sq.seq, m, dqk, ldq, q.data());
        scale_tile(q.data(), m, ldq, c.scale);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(row_max.begin(), row_max.end(), kNegInf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      int64_t col_begin, col_end;
      visible_cols(c.mask, row0, row0 + m, &col_begin, &col_end);
      for (int64_t col0 = col_begin - col_begin % kBlockN; col0 < col_end; col0 += kBlockN) {
        const int64_t n = std::min(kBlockN, c.seqlen_k - col0);
        const int64_t kid = ks.id(c.b, c.kh, col0);
        if (amx) amx_ops.scores(c, ks.kt_vnni_tile(kid), m, n, row0, col0, s.data());
        else score_block(c, q.data(), ldq, ks.kt_tile(kid), m, n, dqk, row0, col0, s.data(), nullptr);
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
        if (amx) amx_ops.accumulate_pv(s.data(), m, ks.v_vnni_tile(kid), ldv, acc.data());
        else tile_gemm(acc.data(), ldv, s.data(), kBlockN, 1, ks.v_tile(kid), ldv, m, n, ldv, true);
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
