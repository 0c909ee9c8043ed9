// CUDA forward kernel (src/cuda/sm80/fwd_*) against the float64 reference with the DESIGN.md §4
// rule, forward only, for every built head-dim pair and both 16-bit dtypes. Lengths are odd and
// cross tile boundaries (kBlockM = 128, kBlockN = 64) so boundary tiles, skipped tiles and the
// per-element mask are all exercised. CudaFwdSmall* cases are small enough for compute-sanitizer
// (scripts/gpu_check.sh runs them under memcheck).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <utility>
#include <string>
#include <vector>

#include "cuda/common/built_hdims.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

struct FwdTarget {
  DType dtype;
  int dim_qk, dim_v;
};

std::vector<FwdTarget> fwd_targets() {
  std::vector<FwdTarget> t;
  for (const cuda::HeadDimPair& d : cuda::kSupportedHeadDims) {
    if (!cuda::head_dim_built(d.qk)) continue;
    t.push_back({DType::kFloat16, d.qk, d.v});
    t.push_back({DType::kBFloat16, d.qk, d.v});
  }
  return t;
}

void PrintTo(const FwdTarget& t, std::ostream* os) {
  *os << check::dtype_short_name(t.dtype) << " Dqk=" << t.dim_qk << " Dv=" << t.dim_v;
}

std::string fwd_target_name(const ::testing::TestParamInfo<FwdTarget>& info) {
  return std::string(check::dtype_short_name(info.param.dtype)) + "_d" + std::to_string(info.param.dim_qk) + "v" +
         std::to_string(info.param.dim_v);
}

class CudaFwd : public ::testing::TestWithParam<FwdTarget> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine";
  }
  check::CaseSpec spec(const std::string& name, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hk) const {
    check::CaseSpec s = dense_spec(name, batch, sq, sk, hq, hk, GetParam().dim_qk, GetParam().dim_v, GetParam().dtype);
    s.backward = false;
    return s;
  }
  static void run(const check::CaseSpec& s) { expect_case_passes(s, Backend::kCUDA); }
};

class CudaFwdSmall : public CudaFwd {};

// ---- small: a few tiles, every feature ------------------------------------------------------
TEST_P(CudaFwdSmall, Plain) { run(spec("plain", 2, 77, 131, 3, 3)); }

TEST_P(CudaFwdSmall, SeqlenOneAndEmptyKeys) {
  run(spec("sq1", 2, 1, 70, 2, 1));
  run(spec("sk1", 1, 65, 1, 2, 2));
}

TEST_P(CudaFwdSmall, CausalBothAlignmentsAndFullyMaskedRows) {
  for (CausalAlign align : {CausalAlign::kBottomRight, CausalAlign::kTopLeft}) {
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{200, 70}, {70, 200}, {129, 129}}) {
      check::CaseSpec s = spec("causal", 1, sq, sk, 2, 1);
      s.options.causal = true;
      s.options.align = align;  // bottom-right with sq > sk leaves the first rows fully masked
      run(s);
    }
  }
}

TEST_P(CudaFwdSmall, SlidingWindow) {
  for (auto [left, right] : {std::pair<int64_t, int64_t>{17, 5}, {0, 0}, {-1, 40}, {100, -1}}) {
    check::CaseSpec s = spec("window", 1, 190, 260, 2, 2);
    s.options.window_left = left;
    s.options.window_right = right;
    run(s);
  }
}

TEST_P(CudaFwdSmall, GqaSoftcapAlibiDropout) {
  check::CaseSpec s = spec("gqa", 2, 99, 150, 6, 2);
  run(s);
  s.name = "softcap";
  s.options.softcap = 12.5;
  s.q_std = s.k_std = 4.0;
  run(s);
  s.name = "alibi";
  s.options.softcap = 0.0;
  s.alibi = check::Alibi::kPerBatchHead;
  s.options.causal = true;
  run(s);
  s.name = "dropout";
  s.alibi = check::Alibi::kNone;
  s.options.dropout_p = 0.3;
  s.options.seed = 0x123456789abcdefull;
  s.options.offset = 77;
  s.identity_v = GetParam().dim_v >= 64;  // out holds dropout(P): every kept/dropped bit is checked
  run(s);
}

TEST_P(CudaFwdSmall, VarlenAndPadded) {
  check::CaseSpec s = spec("varlen", 1, 1, 1, 4, 2);
  s.seqlens_q = {1, 130, 0, 67};
  s.seqlens_k = {200, 64, 5, 0};
  s.options.causal = true;
  run(s);
  check::CaseSpec p = spec("padded", 2, 100, 90, 2, 2);
  p.layout = check::Layout::kPadded;
  run(p);
}

// Telemetry (AttentionOptions::report) on the GPU agrees with the CPU backend on the same inputs.
TEST_P(CudaFwdSmall, TelemetryMatchesCpu) {
  constexpr int64_t kBatch = 2, kHeads = 2, kSq = 150, kSk = 90;
  check::CaseSpec s = spec("telemetry", kBatch, kSq, kSk, kHeads, 1);
  s.options.causal = true;  // bottom-right, Sq > Sk: the first Sq - Sk rows see no key
  s.q_std = s.k_std = 2.0;
  check::Case c(s);
  NumericsReport cpu_report, gpu_report;
  for (auto [backend, report] : {std::pair{Backend::kCPU, &cpu_report}, std::pair{Backend::kCUDA, &gpu_report}}) {
    check::Case::Views v = c.prepare(backend);
    v.options.backend = backend;
    v.options.report = report;
    forward(v.q, v.k, v.v, v.out, v.lse, v.options);
    c.collect(backend);
  }
  EXPECT_EQ(gpu_report.forward_calls, 1);
  EXPECT_EQ(gpu_report.fully_masked_rows, kBatch * kHeads * (kSq - kSk));
  EXPECT_EQ(gpu_report.fully_masked_rows, cpu_report.fully_masked_rows);
  // Both backends round the same 16-bit inputs; their fp32 sums differ only in order.
  constexpr double kRelTol = 1e-4;
  EXPECT_NEAR(gpu_report.lse_min, cpu_report.lse_min, kRelTol * std::fabs(cpu_report.lse_min) + kRelTol);
  EXPECT_NEAR(gpu_report.lse_max, cpu_report.lse_max, kRelTol * std::fabs(cpu_report.lse_max) + kRelTol);
  EXPECT_GT(cpu_report.max_abs_scaled_logit, 0.0);
  EXPECT_NEAR(gpu_report.max_abs_scaled_logit, cpu_report.max_abs_scaled_logit, kRelTol * cpu_report.max_abs_scaled_logit);
}

// ---- larger: many key tiles per block, so the online rescaling is exercised ----------------
TEST_P(CudaFwd, LongSequencesLargeLogits) {
  check::CaseSpec s = spec("long", 1, 700, 1500, 2, 1);
  s.q_std = s.k_std = 3.0;  // logits of a few hundred: the running max changes often
  run(s);
  s.options.causal = true;
  s.options.align = CausalAlign::kTopLeft;
  run(s);
}

INSTANTIATE_TEST_SUITE_P(Built, CudaFwdSmall, ::testing::ValuesIn(fwd_targets()), fwd_target_name);
INSTANTIATE_TEST_SUITE_P(Built, CudaFwd, ::testing::ValuesIn(fwd_targets()), fwd_target_name);
// A build without CUDA (-DFLASHTRAIN_CUDA=OFF) instantiates no head dim: no parameters, not an error.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaFwdSmall);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaFwd);

}  // namespace
}  // namespace flashtrain::testing
