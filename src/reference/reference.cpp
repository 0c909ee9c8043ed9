// Naive attention with the full score matrix of each (batch, head), in double precision.
// Rounding::kInputDtype models a plain PyTorch implementation in the input dtype, the baseline of
// DESIGN.md §4's error rule: every tensor it would materialise is rounded to the input dtype, and
// every sum (the matrix products' accumulators) is carried in fp32, as the GEMMs do.
#include <cmath>
#include <limits>
#include <vector>

#include "../api/backends.h"
#include "../common/dtype.h"
#include "../common/philox.h"

namespace flashtrain::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Rounder {
  DType dtype;
  bool active;
  double operator()(double x) const { return active ? round_to(dtype, x) : x; }
  // A running sum as an fp32 accumulator holds it.
  double acc(double x) const { return active ? static_cast<double>(static_cast<float>(x)) : x; }
};

void load_row(const TensorView& t, int64_t offset, int64_t n, double* dst) {
  for (int64_t d = 0; d < n; ++d) dst[d] = load_as_double(t.data, t.dtype, offset + d);
}

// Scores, probabilities and dropout keep-scale of one (batch, query head): the state both
// directions need. Row-major [Sq][Sk].
struct HeadState {
  int64_t sq = 0, sk = 0;
  std::vector<double> s;       // final logits (after softcap/ALiBi), -inf where masked
  std::vector<double> tanh_s;  // tanh(raw / softcap), for the softcap chain rule
  std::vector<double> p;       // softmax probabilities (undropped)
  std::vector<double> keep;    // 1 / (1 - p_drop) where kept, 0 where dropped
  std::vector<double> lse;     // [Sq]
};

HeadState compute_head(const Problem& pb, int64_t b, int64_t h, const Rounder& rnd) {
  HeadState st;
  st.sq = pb.seqlen_q(b);
  st.sk = pb.seqlen_k(b);
  const int64_t sq = st.sq, sk = st.sk, dqk = pb.dim_qk;
  const int64_t kh = h / pb.group();
  const MaskSpec mask = pb.mask(sq, sk);
  const double slope = pb.alibi_slope(b, h);
  const double keep_scale = 1.0 / (1.0 - pb.dropout_p);
  const uint32_t bh = static_cast<uint32_t>(b * pb.heads_q + h);
  st.s.assign(sq * sk, kNegInf);
  st.tanh_s.assign(sq * sk, 0.0);
  st.p.assign(sq * sk, 0.0);
  st.keep.assign(sq * sk, 1.0);
  st.lse.assign(sq, kNegInf);
  std::vector<double> qrow(dqk), krow(dqk);
  for (int64_t i = 0; i < sq; ++i) {
    load_row(pb.q, element_offset(pb, pb.sq, true, b, i, h), dqk, qrow.data());
    double row_max = kNegInf;
    for (int64_t j = 0; j < sk; ++j) {
      if (pb.dropout_p > 0.0)
        st.keep[i * sk + j] = philox_keep(pb.seed, pb.offset, bh, static_cast<uint32_t>(i),
                                          static_cast<uint32_t>(j), pb.dropout_threshold)
                                  ? keep_scale : 0.0;
      if (!mask.visible(i, j)) continue;
      load_row(pb.k, element_offset(pb, pb.sk, false, b, j, kh), dqk, krow.data());
      double dot = 0.0;
      for (int64_t d = 0; d < dqk; ++d) dot = rnd.acc(dot + qrow[d] * krow[d]);
      double s = rnd(dot * pb.scale);
      if (pb.softcap > 0.0) {
        st.tanh_s[i * sk + j] = std::tanh(s / pb.softcap);
        s = rnd(pb.softcap * st.tanh_s[i * sk + j]);
      }
      if (slope != 0.0) s = rnd(transform_score<double>(s, 0.0, slope, i, j, mask.diag));
      st.s[i * sk + j] = s;
      row_max = std::max(row_max, s);
    }
    if (row_max == kNegInf) continue;  // fully masked row: P = 0, lse = -inf
    double sum = 0.0;
    for (int64_t j = 0; j < sk; ++j) sum += std::exp(st.s[i * sk + j] - row_max);
    st.lse[i] = row_max + std::log(sum);
    for (int64_t j = 0; j < sk; ++j)
      st.p[i * sk + j] = rnd(std::exp(st.s[i * sk + j] - row_max) / sum);
  }
  return st;
}

void store_lse(const Problem& pb, int64_t b, int64_t h, const HeadState& st) {
  for (int64_t i = 0; i < st.sq; ++i)
    store_from_double(pb.lse.data, pb.lse.dtype, lse_offset(pb, b, i, h), st.lse[i]);
}

}  // namespace

void forward(const Problem& pb, Rounding rounding) {
  const Rounder rnd{pb.dtype, rounding == Rounding::kInputDtype};
  const int64_t n_heads = pb.batch * pb.heads_q;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < n_heads; ++bh) {
    const int64_t b = bh / pb.heads_q, h = bh % pb.heads_q, kh = h / pb.group();
    const HeadState st = compute_head(pb, b, h, rnd);
    const int64_t dv = pb.dim_v;
    std::vector<double> acc(dv), vrow(dv);
    for (int64_t i = 0; i < st.sq; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < st.sk; ++j) {
        const double pd = rnd(st.p[i * st.sk + j] * st.keep[i * st.sk + j]);
        if (pd == 0.0) continue;
        load_row(pb.v, element_offset(pb, pb.sv, false, b, j, kh), dv, vrow.data());
        for (int64_t d = 0; d < dv; ++d) acc[d] = rnd.acc(acc[d] + pd * vrow[d]);
      }
      const int64_t o = element_offset(pb, pb.so, true, b, i, h);
      for (int64_t d = 0; d < dv; ++d) store_from_double(pb.out.data, pb.out.dtype, o + d, rnd(acc[d]));
    }
    store_lse(pb, b, h, st);
  }
}

void backward(const Problem& pb, Rounding rounding) {
  const Rounder rnd{pb.dtype, rounding == Rounding::kInputDtype};
  const int64_t dqk = pb.dim_qk, dv = pb.dim_v;
  const int64_t n_kv_heads = pb.batch * pb.heads_k;
  // One task per (batch, KV head): it owns dk/dv of that head and dq of its query heads.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bkh = 0; bkh < n_kv_heads; ++bkh) {
    const int64_t b = bkh / pb.heads_k, kh = bkh % pb.heads_k;
    const int64_t sq = pb.seqlen_q(b), sk = pb.seqlen_k(b);
    std::vector<double> dk(sk * dqk, 0.0), dvacc(sk * dv, 0.0);
    std::vector<double> q(sq * dqk), k(sk * dqk), v(sk * dv), dout(sq * dv);
    for (int64_t j = 0; j < sk; ++j) {
      load_row(pb.k, element_offset(pb, pb.sk, false, b, j, kh), dqk, &k[j * dqk]);
      load_row(pb.v, element_offset(pb, pb.sv, false, b, j, kh), dv, &v[j * dv]);
    }
    for (int64_t h = kh * pb.group(); h < (kh + 1) * pb.group(); ++h) {
      HeadState st = compute_head(pb, b, h, rnd);
      if (rnd.active) {
        // The baseline's backward, like any method that saves lse in the API's fp32 format, sees
        // P through that rounded lse; at |lse| ~ 1e3 its last bit alone moves P by ~1e-4.
        for (int64_t i = 0; i < sq; ++i) {
          if (st.lse[i] == kNegInf) continue;
          const double lse32 = static_cast<float>(st.lse[i]);
          for (int64_t j = 0; j < sk; ++j) st.p[i * sk + j] = rnd(std::exp(st.s[i * sk + j] - lse32));
        }
      }
      for (int64_t i = 0; i < sq; ++i) {
        load_row(pb.q, element_offset(pb, pb.sq, true, b, i, h), dqk, &q[i * dqk]);
        load_row(pb.dout, element_offset(pb, pb.sdo, true, b, i, h), dv, &dout[i * dv]);
      }
      std::vector<double> dq(sq * dqk, 0.0), dp(sk);
      for (int64_t i = 0; i < sq; ++i) {
        double rowsum = 0.0;  // D_i = sum_j P_ij dP_ij  (= rowsum(dO * O))
        for (int64_t j = 0; j < sk; ++j) {
          double g = 0.0;
          for (int64_t d = 0; d < dv; ++d) g = rnd.acc(g + dout[i * dv + d] * v[j * dv + d]);
          dp[j] = rnd(rnd(g) * st.keep[i * sk + j]);
          rowsum += st.p[i * sk + j] * dp[j];
        }
        for (int64_t j = 0; j < sk; ++j) {
          const double pij = st.p[i * sk + j];
          const double pd = rnd(pij * st.keep[i * sk + j]);
          for (int64_t d = 0; d < dv; ++d)
            dvacc[j * dv + d] = rnd.acc(dvacc[j * dv + d] + pd * dout[i * dv + d]);
          if (pij == 0.0) continue;
          double ds = rnd(pij * (dp[j] - rowsum));
          if (pb.softcap > 0.0) {
            const double t = st.tanh_s[i * sk + j];
            ds = rnd(ds * (1.0 - t * t));
          }
          const double g = ds * pb.scale;
          for (int64_t d = 0; d < dqk; ++d) {
            dq[i * dqk + d] = rnd.acc(dq[i * dqk + d] + g * k[j * dqk + d]);
            dk[j * dqk + d] = rnd.acc(dk[j * dqk + d] + g * q[i * dqk + d]);
          }
        }
      }
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t o = element_offset(pb, pb.sdq, true, b, i, h);
        for (int64_t d = 0; d < dqk; ++d)
          store_from_double(pb.dq.data, pb.dq.dtype, o + d, rnd(dq[i * dqk + d]));
      }
    }
    for (int64_t j = 0; j < sk; ++j) {
      const int64_t ok = element_offset(pb, pb.sdk, false, b, j, kh);
      for (int64_t d = 0; d < dqk; ++d)
        store_from_double(pb.dk.data, pb.dk.dtype, ok + d, rnd(dk[j * dqk + d]));
      const int64_t ov = element_offset(pb, pb.sdv, false, b, j, kh);
      for (int64_t d = 0; d < dv; ++d)
        store_from_double(pb.dv.data, pb.dv.dtype, ov + d, rnd(dvacc[j * dv + d]));
    }
  }
}

}  // namespace flashtrain::reference
