// The exact correction term of precision=high's CUDA backward (src/cuda/common/exact_dsum.h): on
// the CPU, D_i = sum_j P_ij dL/dP_ij from q, k, v, dO and lse in fp32 must equal dO_i . O_i with
// O the float64 reference output (the identity the backward relies on), under every mask kind,
// softcap, ALiBi, dropout and GQA. The GPU kernel (src/cuda/sm80/bwd_exact_dsum.h) runs the same
// function, a warp per row with the keys split over lanes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/mask.h"
#include "cuda/common/exact_dsum.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

// For one fp32 case: every row's D (whole and as 32 lane shares) within 1e-4 of dO . O64, relative
// to sum_e |dO_e O64_e|; rows that see no key give exactly 0.
void expect_exact_dsum_matches(check::CaseSpec s) {
  s.dtype = DType::kFloat32;
  s.backward = false;
  check::Case c(s);
  const check::Outputs ref = c.run(Backend::kReference);  // out, lse in float64, logical order
  const check::Case::Views v = c.prepare(Backend::kCPU);
  const int64_t B = s.batch, Sq = s.seqlen_q, Sk = s.seqlen_k, Hq = s.heads_q, Hk = s.heads_k;
  const int64_t Dqk = s.dim_qk, Dv = s.dim_v;
  const double scale = s.options.softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(Dqk)));
  const int64_t diag = s.options.align == CausalAlign::kBottomRight ? Sk - Sq : 0;
  const MaskSpec mask{diag, s.options.window_left, s.options.causal ? 0 : s.options.window_right, Sk};
  const float* q = static_cast<const float*>(v.q.data);
  const float* k = static_cast<const float*>(v.k.data);
  const float* vv = static_cast<const float*>(v.v.data);
  const float* dout = static_cast<const float*>(v.dout.data);
  const float* slopes = static_cast<const float*>(v.options.alibi_slopes.data);
  double worst = 0.0, scale_max = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        cuda::ExactDsumRow row{};
        row.i = i;
        row.scale = static_cast<float>(scale);
        row.softcap = static_cast<float>(s.options.softcap);
        row.alibi_slope = slopes ? slopes[(s.alibi == check::Alibi::kPerBatchHead ? b * Hq : 0) + h] : 0.0f;
        row.lse = static_cast<float>(ref.lse[(b * Hq + h) * Sq + i]);
        row.dropout = s.options.dropout_p > 0.0;
        row.seed = s.options.seed;
        row.offset = s.options.offset;
        row.bh = static_cast<uint32_t>(b * Hq + h);
        row.threshold = dropout_threshold(s.options.dropout_p);
        row.dropout_rescale = static_cast<float>(1.0 / (1.0 - s.options.dropout_p));
        const int64_t hk = h / (Hq / Hk);
        const float* qi = q + b * v.q.stride[0] + i * v.q.stride[1] + h * v.q.stride[2];
        const float* doi = dout + b * v.dout.stride[0] + i * v.dout.stride[1] + h * v.dout.stride[2];
        const float* kb = k + b * v.k.stride[0] + hk * v.k.stride[2];
        const float* vb = vv + b * v.v.stride[0] + hk * v.v.stride[2];
        const float d = cuda::exact_row_dsum(row, mask, qi, doi, kb, v.k.stride[1], vb, v.v.stride[1],
                                             static_cast<int>(Dqk), static_cast<int>(Dv), 0, 1);
        // Lanes of the GPU kernel: 32 interleaved shares sum to the same value.
        float lanes = 0.0f;
        for (int lane = 0; lane < 32; ++lane)
          lanes += cuda::exact_row_dsum(row, mask, qi, doi, kb, v.k.stride[1], vb, v.v.stride[1],
                                        static_cast<int>(Dqk), static_cast<int>(Dv), lane, 32);
        double d64 = 0.0, mag = 0.0;
        for (int64_t e = 0; e < Dv; ++e) {
          const double o = ref.out[((b * Sq + i) * Hq + h) * Dv + e];
          d64 += static_cast<double>(doi[e]) * o;
          mag += std::fabs(static_cast<double>(doi[e]) * o);
        }
        scale_max = std::max(scale_max, mag);
        worst = std::max({worst, std::fabs(d - d64) / (mag + 1e-30), std::fabs(lanes - d64) / (mag + 1e-30)});
        if (!std::isfinite(ref.lse[(b * Hq + h) * Sq + i])) EXPECT_EQ(d, 0.0f) << s.name << " row " << i;
      }
  // fp32 sums of a few hundred terms: a few 1e-6 of the magnitude of the terms.
  EXPECT_LT(worst, 1e-4) << s.name;
  EXPECT_GT(scale_max, 0.0) << s.name;
}

TEST(ExactDsum, MatchesDoutDotReferenceOutput) {
  check::CaseSpec plain = dense_spec("plain GQA", 2, 37, 53, 4, 2, 64, 64, DType::kFloat32);
  expect_exact_dsum_matches(plain);
  check::CaseSpec causal = dense_spec("causal bottom-right, Dv != Dqk", 1, 45, 70, 2, 1, 32, 48, DType::kFloat32);
  causal.options.causal = true;
  expect_exact_dsum_matches(causal);
  check::CaseSpec masked = dense_spec("causal, Sq > Sk: fully masked rows", 1, 60, 40, 2, 2, 32, 32, DType::kFloat32);
  masked.options.causal = true;  // bottom-right: the first 20 rows see no key
  expect_exact_dsum_matches(masked);
  check::CaseSpec top_left = dense_spec("causal top-left", 1, 40, 60, 2, 2, 32, 32, DType::kFloat32);
  top_left.options.causal = true;
  top_left.options.align = CausalAlign::kTopLeft;
  expect_exact_dsum_matches(top_left);
  check::CaseSpec window = dense_spec("window softcap ALiBi", 2, 50, 50, 2, 1, 32, 32, DType::kFloat32);
  window.options.window_left = 7;
  window.options.window_right = 3;
  window.options.softcap = 5.0;
  window.alibi = check::Alibi::kPerBatchHead;
  expect_exact_dsum_matches(window);
  check::CaseSpec dropout = dense_spec("dropout", 1, 33, 41, 2, 2, 32, 32, DType::kFloat32);
  dropout.options.dropout_p = 0.2;
  dropout.options.seed = 11;
  dropout.options.offset = 3;
  expect_exact_dsum_matches(dropout);
}

}  // namespace
}  // namespace flashtrain::testing
