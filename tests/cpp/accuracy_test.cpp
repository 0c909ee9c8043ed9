// Every feature of include/flashtrain/attention.h against the float64 reference with DESIGN.md
// §4's rule, for every backend and dtype present (fp32 on the CPU only). Sizes are odd on
// purpose: Sq != Sk, not multiples of 16/64/128, seqlen 1, Hq != Hk.
#include <gtest/gtest.h>

#include "test_util.h"

namespace flashtrain::testing {
namespace {

using check::Alibi;
using check::CaseSpec;
using check::Layout;

class Accuracy : public ::testing::TestWithParam<Target> {
 protected:
  Backend backend() const { return GetParam().backend; }
  DType dtype() const { return GetParam().dtype; }
  bool on_cpu() const { return backend() == Backend::kCPU; }
  // Odd-sized base problem: B=2, Sq=77, Sk=131, Hq=Hk=2, D=64.
  CaseSpec base(const std::string& name) const {
    return dense_spec(name, 2, 77, 131, 2, 2, 64, 64, dtype());
  }
  // A case whose head dim this CUDA build left out skips the test (every case of a test shares it).
  void check(const CaseSpec& s) const {
    FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, backend());
    expect_case_passes(s, backend());
  }
  // Every feature at once on the base problem: causal, window, softcap, ALiBi, dropout, GQA, padded.
  CaseSpec everything_together(const std::string& name) const {
    CaseSpec s = base(name);
    s.heads_q = 4;
    s.heads_k = 2;
    s.options.causal = true;
    s.options.window_left = 31;
    s.options.softcap = 20.0;
    s.alibi = Alibi::kPerBatchHead;
    s.options.dropout_p = 0.17;
    s.options.seed = 99;
    s.layout = Layout::kPadded;
    return s;
  }
};

TEST_P(Accuracy, Plain) {
  check(base("plain"));
  check(dense_spec("Sq > Sk", 1, 150, 67, 3, 3, 64, 64, dtype()));
  check(dense_spec("Sq = Sk = 129", 1, 129, 129, 2, 2, 64, 64, dtype()));
}

TEST_P(Accuracy, SeqlenOne) {
  check(dense_spec("Sq = 1", 2, 1, 97, 2, 2, 64, 64, dtype()));
  check(dense_spec("Sk = 1", 2, 45, 1, 2, 2, 64, 64, dtype()));
  check(dense_spec("Sq = Sk = 1", 3, 1, 1, 2, 2, 64, 64, dtype()));
}

TEST_P(Accuracy, StridedPackedQKV) {
  CaseSpec s = dense_spec("q, k, v slices of one packed qkv buffer", 2, 83, 83, 4, 4, 64, 64, dtype());
  s.layout = Layout::kPackedQKV;
  check(s);
}

TEST_P(Accuracy, StridedPaddedEverywhere) {
  CaseSpec s = base("padded strides on every input and output");
  s.layout = Layout::kPadded;
  check(s);
  s.options.causal = true;
  s.heads_q = 4;
  check(s);
}

TEST_P(Accuracy, Varlen) {
  CaseSpec s = base("varlen with an empty and a length-1 sequence");
  s.seqlens_q = {37, 0, 1, 70, 5};
  s.seqlens_k = {50, 3, 1, 66, 0};
  check(s);
  s.name = "varlen causal";
  s.options.causal = true;
  check(s);
  s.name = "varlen causal top-left, padded";
  s.options.align = CausalAlign::kTopLeft;
  s.layout = Layout::kPadded;
  check(s);
}

TEST_P(Accuracy, VarlenPackedQKV) {
  CaseSpec s = base("varlen packed qkv");
  s.seqlens_q = s.seqlens_k = {33, 1, 90};
  s.layout = Layout::kPackedQKV;
  check(s);
}

TEST_P(Accuracy, GroupedQueryAttention) {
  CaseSpec s = base("GQA Hq=8 Hk=2");
  s.heads_q = 8;
  s.heads_k = 2;
  check(s);
  s.name = "MQA Hq=8 Hk=1";
  s.heads_k = 1;
  s.options.causal = true;
  check(s);
}

TEST_P(Accuracy, ValueDimDiffers) {
  if (!on_cpu() && !cuda_head_dim_built(192)) GTEST_SKIP() << "head dim 192 is not in FLASHTRAIN_HDIMS";
  check(dense_spec("Dqk 192 / Dv 128", 1, 61, 93, 2, 1, 192, 128, dtype()));
  if (on_cpu()) check(dense_spec("Dqk 40 / Dv 24", 2, 53, 71, 4, 2, 40, 24, dtype()));
}

TEST_P(Accuracy, SmallAndOddHeadDims) {
  if (!on_cpu()) GTEST_SKIP() << "GPU kernels instantiate head dims 64..256 only";
  check(dense_spec("D = 8", 2, 41, 59, 2, 2, 8, 8, dtype()));
  check(dense_spec("D = 33", 1, 41, 59, 2, 1, 33, 33, dtype()));
}

TEST_P(Accuracy, SoftmaxScale) {
  CaseSpec s = base("explicit scale 0.3");
  s.options.softmax_scale = 0.3;
  check(s);
  s.name = "explicit scale 0.125 (the default at D = 64)";
  s.options.softmax_scale = 0.125;
  check(s);
}

TEST_P(Accuracy, CausalBothAlignments) {
  for (const CausalAlign align : {CausalAlign::kBottomRight, CausalAlign::kTopLeft}) {
    const char* a = align == CausalAlign::kBottomRight ? "bottom-right" : "top-left";
    for (const auto& [sq, sk] : {std::pair<int64_t, int64_t>{61, 140}, {140, 61}, {99, 99}}) {
      CaseSpec s = dense_spec(std::string("causal ") + a + " Sq=" + std::to_string(sq) +
                                  " Sk=" + std::to_string(sk),
                              2, sq, sk, 2, 2, 64, 64, dtype());
      s.options.causal = true;
      s.options.align = align;
      check(s);
    }
  }
}

TEST_P(Accuracy, SlidingWindow) {
  struct W {
    int64_t left, right;
  };
  for (const W w : {W{17, -1}, W{-1, 9}, W{23, 5}, W{0, 0}}) {
    CaseSpec s = base("window (" + std::to_string(w.left) + ", " + std::to_string(w.right) + ")");
    s.options.window_left = w.left;
    s.options.window_right = w.right;
    check(s);
    s.name += " top-left";
    s.options.align = CausalAlign::kTopLeft;
    check(s);
  }
  CaseSpec s = base("causal + window left 20");
  s.options.causal = true;
  s.options.window_left = 20;
  check(s);
}

TEST_P(Accuracy, Softcap) {
  CaseSpec s = base("softcap 5");
  s.options.softcap = 5.0;
  s.q_std = s.k_std = 3.0;  // logits well past the cap, so tanh saturates
  check(s);
  s.name = "softcap 30 causal";
  s.options.softcap = 30.0;
  s.options.causal = true;
  check(s);
}

TEST_P(Accuracy, Alibi) {
  CaseSpec s = base("ALiBi [Hq]");
  s.heads_q = 4;
  s.alibi = Alibi::kPerHead;
  check(s);
  s.name = "ALiBi [B, Hq] causal";
  s.alibi = Alibi::kPerBatchHead;
  s.options.causal = true;
  check(s);
  s.name = "ALiBi [B, Hq] varlen top-left";
  s.seqlens_q = {20, 1, 47};
  s.seqlens_k = {33, 9, 30};
  s.options.align = CausalAlign::kTopLeft;
  check(s);
}

TEST_P(Accuracy, Dropout) {
  CaseSpec s = base("dropout 0.17");
  s.options.dropout_p = 0.17;
  s.options.seed = 0x1234567890abcdefull;
  s.options.offset = 0x0000000500000007ull;
  check(s);
  s.name = "dropout 0.17 causal GQA varlen";
  s.heads_q = 4;
  s.seqlens_q = {19, 1, 66};
  s.seqlens_k = {40, 2, 66};
  s.options.causal = true;
  check(s);
}

TEST_P(Accuracy, EverythingTogether) {
  check(everything_together("causal window softcap ALiBi dropout GQA padded"));
}

TEST_P(Accuracy, LargeLogits) {
  CaseSpec s = base("logits ~1e3 (q, k ~ 30 randn)");
  s.q_std = s.k_std = 30.0;
  check(s);
}

TEST_P(Accuracy, LargeUpstreamGradient) {
  CaseSpec s = base("dO ~ 1e4 randn");
  s.dout_std = 1e4;
  check(s);
}

// kHigh: the CPU backend keeps P and dS in fp32 (it always does); the CUDA backward runs the split
// kernel (P and dS as hi + lo 16-bit halves) as its only pass. Both pass the rule, on the features
// the split kernel handles itself (masks, softcap, ALiBi, dropout, GQA, varlen, strides).
TEST_P(Accuracy, PrecisionHigh) {
  CaseSpec s = base("Precision::kHigh");
  s.options.precision = Precision::kHigh;
  s.options.causal = true;
  check(s);
  CaseSpec all = everything_together("Precision::kHigh, causal window softcap ALiBi dropout GQA padded");
  all.options.precision = Precision::kHigh;
  check(all);
  CaseSpec varlen = base("Precision::kHigh, varlen");
  varlen.options.precision = Precision::kHigh;
  varlen.seqlens_q = {37, 0, 1, 70, 5};
  varlen.seqlens_k = {50, 3, 1, 66, 0};
  check(varlen);
}

INSTANTIATE_TEST_SUITE_P(Targets, Accuracy, ::testing::ValuesIn(targets_present()), target_name);

}  // namespace
}  // namespace flashtrain::testing
