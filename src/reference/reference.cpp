// Naive attention with the full score matrix of each (batch, head), in double precision.
// Rounding::kInputDtype models a plain PyTorch implementation in the input dtype, the baseline of
// DESIGN.md §4's error rule: every tensor it would materialise is rounded to the input dtype, and
// every sum (the matrix products' accumulators) is carried in fp32, as the GEMMs do.
#include <omp.h>

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
  // Rows are independent; inside forward()'s loop over heads (already parallel) this runs serially.
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < sq; ++i) {
    std::vector<double> qrow(dqk), krow(dqk);
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
  // One task per (batch, query head) when they keep every thread busy; otherwise heads one after
  // another with their rows in parallel (nested regions run serially).
#pragma omp parallel for schedule(dynamic, 1) if (n_heads >= omp_get_max_threads())
  for (int64_t bh = 0; bh < n_heads; ++bh) {
    const int64_t b = bh / pb.heads_q, h = bh % pb.heads_q, kh = h / pb.group();
    const HeadState st = compute_head(pb, b, h, rnd);
    const int64_t dv = pb.dim_v;
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t i = 0; i < st.sq; ++i) {
      std::vector<double> acc(dv, 0.0), vrow(dv);
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
  // One task per (batch, KV head): it owns dk/dv of that head and dq of its query heads. The tasks
  // run in parallel when they keep every thread busy; otherwise one after another, each spreading
  // its rows and keys over the threads (nested regions run serially). Every sum is taken in the
  // same order either way: dk and dv of key j over the query heads, then the rows, in order; dq of
  // row i over the keys in order.
#pragma omp parallel for schedule(dynamic, 1) if (n_kv_heads >= omp_get_max_threads())
  for (int64_t bkh = 0; bkh < n_kv_heads; ++bkh) {
    const int64_t b = bkh / pb.heads_k, kh = bkh % pb.heads_k;
    const int64_t sq = pb.seqlen_q(b), sk = pb.seqlen_k(b);
    std::vector<double> dk(sk * dqk, 0.0), dvacc(sk * dv, 0.0);
    std::vector<double> q(sq * dqk), k(sk * dqk), v(sk * dv), dout(sq * dv);
    for (int64_t j = 0; j < sk; ++j) {
      load_row(pb.k, element_offset(pb, pb.sk, false, b, j, kh), dqk, &k[j * dqk]);
      load_row(pb.v, element_offset(pb, pb.sv, false, b, j, kh), dv, &v[j * dv]);
    }
    // Per (i, j) of the current query head: the dropped P that dV takes and dS * scale.
    std::vector<double> pd(sq * sk), gs(sq * sk);
    for (int64_t h = kh * pb.group(); h < (kh + 1) * pb.group(); ++h) {
      HeadState st = compute_head(pb, b, h, rnd);
#pragma omp parallel for schedule(dynamic, 8)
      for (int64_t i = 0; i < sq; ++i) {
        load_row(pb.q, element_offset(pb, pb.sq, true, b, i, h), dqk, &q[i * dqk]);
        load_row(pb.dout, element_offset(pb, pb.sdo, true, b, i, h), dv, &dout[i * dv]);
        // The baseline's backward, like any method that saves lse in the API's fp32 format, sees
        // P through that rounded lse; at |lse| ~ 1e3 its last bit alone moves P by ~1e-4.
        if (rnd.active && st.lse[i] != kNegInf) {
          const double lse32 = static_cast<float>(st.lse[i]);
          for (int64_t j = 0; j < sk; ++j) st.p[i * sk + j] = rnd(std::exp(st.s[i * sk + j] - lse32));
        }
        std::vector<double> dp(sk);
        double rowsum = 0.0;  // D_i = sum_j P_ij dP_ij  (= rowsum(dO * O))
        for (int64_t j = 0; j < sk; ++j) {
          double g = 0.0;
          for (int64_t d = 0; d < dv; ++d) g = rnd.acc(g + dout[i * dv + d] * v[j * dv + d]);
          dp[j] = rnd(rnd(g) * st.keep[i * sk + j]);
          rowsum += st.p[i * sk + j] * dp[j];
        }
        for (int64_t j = 0; j < sk; ++j) {
          const double pij = st.p[i * sk + j];
          pd[i * sk + j] = rnd(pij * st.keep[i * sk + j]);
          if (pij == 0.0) continue;
          double ds = rnd(pij * (dp[j] - rowsum));
          if (pb.softcap > 0.0) {
            const double t = st.tanh_s[i * sk + j];
            ds = rnd(ds * (1.0 - t * t));
          }
          gs[i * sk + j] = ds * pb.scale;
        }
      }
#pragma omp parallel for schedule(dynamic, 8)
      for (int64_t j = 0; j < sk; ++j) {
        for (int64_t i = 0; i < sq; ++i) {
          const double pdij = pd[i * sk + j];
          for (int64_t d = 0; d < dv; ++d) dvacc[j * dv + d] = rnd.acc(dvacc[j * dv + d] + pdij * dout[i * dv + d]);
          if (st.p[i * sk + j] == 0.0) continue;
          const double g = gs[i * sk + j];
          for (int64_t d = 0; d < dqk; ++d) dk[j * dqk + d] = rnd.acc(dk[j * dqk + d] + g * q[i * dqk + d]);
        }
      }
#pragma omp parallel for schedule(dynamic, 8)
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> dq(dqk, 0.0);
        for (int64_t j = 0; j < sk; ++j) {
          if (st.p[i * sk + j] == 0.0) continue;
          const double g = gs[i * sk + j];
          for (int64_t d = 0; d < dqk; ++d) dq[d] = rnd.acc(dq[d] + g * k[j * dqk + d]);
        }
        const int64_t o = element_offset(pb, pb.sdq, true, b, i, h);
        for (int64_t d = 0; d < dqk; ++d) store_from_double(pb.dq.data, pb.dq.dtype, o + d, rnd(dq[d]));
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
