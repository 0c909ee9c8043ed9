// Tile helpers of the CPU backend: loading rows of any dtype into fp32 tiles, and the score
// block S = transform(scale * Q K^T) with masking, shared by forward and backward.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../api/problem.h"
#include "../common/dtype.h"
#include "../common/philox.h"
#include "gemm.h"

namespace flashtrain::cpu {

constexpr int64_t kBlockM = 64;  // query rows per tile
constexpr int64_t kBlockN = 64;  // key columns per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// x[j] = exp(x[j] - shift) for j < n, vectorisable (std::exp is a scalar call here). exp(t) =
// 2^k * 2^f with k = round(t * log2 e), |f| <= 1/2 and 2^f from its degree-7 Taylor polynomial
// (relative error < 1e-8, below fp32 rounding). Results under 2^-125 (and -inf) give exactly 0,
// so masked scores contribute nothing. Arguments here are <= ~0 (scores minus their max / lse).
inline void exp_shifted(float* x, int64_t n, float shift) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2 = 0.6931471805599453f;
  constexpr float kMinExp2 = -125.0f, kMaxExp2 = 127.0f;
  // Taylor coefficients of 2^f = e^(f ln 2): (ln 2)^i / i!.
  constexpr float c1 = kLn2, c2 = c1 * kLn2 / 2, c3 = c2 * kLn2 / 3, c4 = c3 * kLn2 / 4;
  constexpr float c5 = c4 * kLn2 / 5, c6 = c5 * kLn2 / 6, c7 = c6 * kLn2 / 7;
  for (int64_t j = 0; j < n; ++j) {
    const float t = (x[j] - shift) * kLog2e;
    const float tc = std::min(std::max(t, kMinExp2), kMaxExp2);
    const float k = std::nearbyint(tc);
    const float f = tc - k;
    const float p = 1.0f + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * (c6 + f * c7))))));
    int32_t bits;
    std::memcpy(&bits, &p, sizeof bits);
    bits += static_cast<int32_t>(k) << 23;
    float r;
    std::memcpy(&r, &bits, sizeof r);
    x[j] = t < kMinExp2 ? 0.0f : (t != t ? t : r);  // NaN in, NaN out
  }
}

// max(a, b) that returns NaN when either is NaN (std::max drops a NaN second argument).
inline float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

static_assert(kBlockN % kLanes == 0, "score rows are processed in whole vectors");

// Largest of the kBlockN scores of a row, NaN when any of them is NaN.
inline float row_max_nan(const float* row) {
  Vec m = Vec::load(row);
  bool nan = m.any_nan();
  for (int64_t j = kLanes; j < kBlockN; j += kLanes) {
    const Vec x = Vec::load(row + j);
    nan |= x.any_nan();
    m = max(m, x);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m.reduce_max();
}

// Sum of the kBlockN entries of a row.
inline float row_total(const float* row) {
  Vec s = Vec::load(row);
  for (int64_t j = kLanes; j < kBlockN; j += kLanes) s = s + Vec::load(row + j);
  return s.reduce_add();
}

// Loads `rows` rows of `width` elements (row r at element offset base + r * row_stride) into a
// dense fp32 tile [rows][ld], zeroing the padding columns width..ld-1.
inline void load_tile(const TensorView& t, int64_t base, int64_t row_stride, int64_t rows,
                      int64_t width, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = base + r * row_stride;
    float* out = dst + r * ld;
    switch (t.dtype) {
      case DType::kFloat32: {
        const float* src = static_cast<const float*>(t.data) + off;
        std::copy(src, src + width, out);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t* src = static_cast<const uint16_t*>(t.data) + off;
        for (int64_t d = 0; d < width; ++d) out[d] = bf16_to_float(src[d]);
        break;
      }
      case DType::kFloat16: {
        const uint16_t* src = static_cast<const uint16_t*>(t.data) + off;
        for (int64_t d = 0; d < width; ++d) out[d] = fp16_to_float(src[d]);
        break;
      }
      default:
        for (int64_t d = 0; d < width; ++d)
          out[d] = static_cast<float>(load_as_double(t.data, t.dtype, off + d));
    }
    std::fill(out + width, out + ld, 0.0f);
  }
}

// Stores `width` columns of a dense fp32 tile [rows][ld] into rows of t, converting to t's dtype.
inline void store_tile(const TensorView& t, int64_t base, int64_t row_stride, int64_t rows,
                       int64_t width, int64_t ld, const float* src) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = base + r * row_stride;
    const float* in = src + r * ld;
    switch (t.dtype) {
      case DType::kFloat32: std::copy(in, in + width, static_cast<float*>(t.data) + off); break;
      case DType::kBFloat16: {
        uint16_t* dst = static_cast<uint16_t*>(t.data) + off;
        for (int64_t d = 0; d < width; ++d) dst[d] = float_to_bf16(in[d]);
        break;
      }
      case DType::kFloat16: {
        uint16_t* dst = static_cast<uint16_t*>(t.data) + off;
        for (int64_t d = 0; d < width; ++d) dst[d] = float_to_fp16(in[d]);
        break;
      }
      default:
        for (int64_t d = 0; d < width; ++d) store_from_double(t.data, t.dtype, off + d, in[d]);
    }
  }
}

// Transposes a [rows][ld] tile into [width][kBlockN], zero-padding columns rows..kBlockN-1,
// so the score products always run over a full, compile-time tile of keys.
inline void transpose_padded(const float* src, int64_t rows, int64_t width, int64_t ld, float* dst) {
  for (int64_t d = 0; d < width; ++d) {
    float* out = dst + d * kBlockN;
    for (int64_t r = 0; r < rows; ++r) out[r] = src[r * ld + d];
    std::fill(out + rows, out + kBlockN, 0.0f);
  }
}

// Multiplies rows [rows][ld] by a scalar in place (the softmax scale folded into a query tile).
inline void scale_tile(float* x, int64_t rows, int64_t ld, float alpha) {
  const Vec a = Vec::set1(alpha);
  for (int64_t e = 0; e < rows * ld; e += kLanes) (Vec::load(x + e) * a).store(x + e);
}

// Everything the score block of one (batch, query head) needs.
struct HeadContext {
  int64_t b, h, kh;
  int64_t seqlen_q, seqlen_k;
  MaskSpec mask;
  float scale, softcap, slope;
  uint32_t bh;  // philox stream id b * Hq + h
};

inline HeadContext head_context(const Problem& p, int64_t b, int64_t h) {
  HeadContext c;
  c.b = b;
  c.h = h;
  c.kh = h / p.group();
  c.seqlen_q = p.seqlen_q(b);
  c.seqlen_k = p.seqlen_k(b);
  c.mask = p.mask(c.seqlen_q, c.seqlen_k);
  c.scale = static_cast<float>(p.scale);
  c.softcap = static_cast<float>(p.softcap);
  c.slope = p.alibi_slope(b, h);
  c.bh = static_cast<uint32_t>(b * p.heads_q + h);
  return c;
}

// Key columns [begin, end) that any row in [row0, row1) can see.
inline void visible_cols(const MaskSpec& m, int64_t row0, int64_t row1, int64_t* begin, int64_t* end) {
  *begin = m.col_begin(row0);
  *end = m.col_end(row1 - 1);
}

// Softcap, ALiBi and the mask (-inf, also on the padding columns n..kBlockN-1) applied in place to
// the scaled products s[m][kBlockN] of rows row0.. and cols col0.. (n valid cols). When tanh_out
// is non-null and softcap is on, tanh(raw / softcap) is written there for the backward chain rule.
inline void finish_scores(const HeadContext& c, int64_t m, int64_t n, int64_t row0, int64_t col0,
                          float* s, float* tanh_out) {
  for (int64_t i = 0; i < m; ++i) {
    float* srow = s + i * kBlockN;
    const int64_t row = row0 + i;
    const int64_t jb = std::max<int64_t>(c.mask.col_begin(row) - col0, 0);
    const int64_t je = std::min<int64_t>(c.mask.col_end(row) - col0, n);
    if (jb >= je) {
      std::fill(srow, srow + kBlockN, kNegInf);
      continue;
    }
    std::fill(srow, srow + jb, kNegInf);
    std::fill(srow + je, srow + kBlockN, kNegInf);
    if (c.softcap <= 0.0f && c.slope == 0.0f) continue;
    for (int64_t j = jb; j < je; ++j) {
      float x = srow[j];
      if (c.softcap > 0.0f) {
        const float t = std::tanh(x / c.softcap);
        if (tanh_out) tanh_out[i * kBlockN + j] = t;
        x = c.softcap * t;
      }
      if (c.slope != 0.0f) {
        const int64_t dist = row + c.mask.diag - (col0 + j);
        x -= c.slope * static_cast<float>(dist < 0 ? -dist : dist);
      }
      srow[j] = x;
    }
  }
}

// S[m][kBlockN] for rows row0.. (m rows) and cols col0.. (n valid cols): scale * q.k, then
// finish_scores. q is [m][ld] and already multiplied by scale (once per query tile, not once per
// product); kt is the transposed, padded key tile [dqk][kBlockN].
inline void score_block(const HeadContext& c, const float* q, int64_t ld, const float* kt, int64_t m,
                        int64_t n, int64_t dqk, int64_t row0, int64_t col0, float* s, float* tanh_out) {
  tile_gemm(s, kBlockN, q, ld, 1, kt, kBlockN, m, dqk, kBlockN, false);
  finish_scores(c, m, n, row0, col0, s, tanh_out);
}

// Multiplies P[m][kBlockN] (n valid columns) in place by the dropout keep-scale (0 or 1 / (1 - p)).
inline void apply_dropout(const Problem& p, const HeadContext& c, int64_t row0, int64_t col0,
                          int64_t m, int64_t n, float* pmat) {
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t row = static_cast<uint32_t>(row0 + i);
    for (int64_t j = 0; j < n;) {
      const uint32_t col = static_cast<uint32_t>(col0 + j);
      const Philox4 r = dropout_bits(p.seed, p.offset, c.bh, row, col >> 2);
      for (uint32_t w = col & 3; w < 4 && j < n; ++w, ++j)
        pmat[i * kBlockN + j] *= r.x[w] >= p.dropout_threshold ? keep_scale : 0.0f;
    }
  }
}

}  // namespace flashtrain::cpu
