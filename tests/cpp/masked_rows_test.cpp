// Rows that see no key (DESIGN.md §2): out = 0, lse = -inf, zero gradients and no NaN anywhere,
// on every backend and dtype, for each way a configuration can leave a row without keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/mask.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

using check::CaseSpec;

class MaskedRows : public ::testing::TestWithParam<Target> {
 protected:
  // Runs s and checks every fully masked row exactly (and that there is one when
  // expect_masked_rows), every other element finite, every key
  // column no query sees has zero dk/dv, and the §4 rule on the whole case.
  void check_rows(const CaseSpec& s, bool expect_masked_rows = true) {
    FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, GetParam().backend);
    expect_case_passes(s, GetParam().backend);
    check::Case c(s);
    const check::Outputs x = c.run(GetParam().backend);
    const bool varlen = !s.seqlens_q.empty();
    const int64_t batch = varlen ? static_cast<int64_t>(s.seqlens_q.size()) : s.batch;
    int64_t start_q = 0, start_k = 0, total_q = 0, masked_rows = 0;
    for (int64_t b = 0; b < batch; ++b) total_q += varlen ? s.seqlens_q[b] : s.seqlen_q;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t sq = varlen ? s.seqlens_q[b] : s.seqlen_q;
      const int64_t sk = varlen ? s.seqlens_k[b] : s.seqlen_k;
      const int64_t diag = s.options.align == CausalAlign::kBottomRight ? sk - sq : 0;
      const MaskSpec mask{diag, s.options.window_left, s.options.causal ? 0 : s.options.window_right, sk};
      // Row r of batch b in the gathered [.., Hq, D] order (varlen rows are global).
      auto row_index = [&](int64_t i) { return varlen ? start_q + i : b * sq + i; };
      for (int64_t i = 0; i < sq; ++i) {
        if (mask.col_begin(i) < mask.col_end(i)) continue;
        ++masked_rows;
        for (int64_t h = 0; h < s.heads_q; ++h) {
          const int64_t lse_e = varlen ? h * total_q + start_q + i : (b * s.heads_q + h) * sq + i;
          EXPECT_EQ(x.lse[lse_e], -std::numeric_limits<double>::infinity())
              << s.name << ": lse of masked row " << i << " of batch " << b << " head " << h;
          for (int64_t d = 0; d < s.dim_v; ++d)
            ASSERT_EQ(x.out[(row_index(i) * s.heads_q + h) * s.dim_v + d], 0.0)
                << s.name << ": out of masked row " << i << " of batch " << b << " head " << h;
          for (int64_t d = 0; d < s.dim_qk; ++d)
            ASSERT_EQ(x.dq[(row_index(i) * s.heads_q + h) * s.dim_qk + d], 0.0)
                << s.name << ": dq of masked row " << i << " of batch " << b << " head " << h;
        }
      }
      // Key columns no query row sees get exactly zero dk and dv.
      for (int64_t j = 0; j < sk; ++j) {
        bool seen = false;
        for (int64_t i = 0; i < sq && !seen; ++i) seen = mask.visible(i, j);
        if (seen) continue;
        const int64_t kr = varlen ? start_k + j : b * sk + j;
        for (int64_t h = 0; h < s.heads_k; ++h) {
          for (int64_t d = 0; d < s.dim_qk; ++d)
            ASSERT_EQ(x.dk[(kr * s.heads_k + h) * s.dim_qk + d], 0.0) << s.name << ": dk of unseen key " << j;
          for (int64_t d = 0; d < s.dim_v; ++d)
            ASSERT_EQ(x.dv[(kr * s.heads_k + h) * s.dim_v + d], 0.0) << s.name << ": dv of unseen key " << j;
        }
      }
      start_q += sq;
      start_k += sk;
    }
    if (expect_masked_rows) {
      EXPECT_GT(masked_rows, 0) << s.name << ": the configuration was meant to mask some rows";
    }
    for (const auto* t : {&x.out, &x.dq, &x.dk, &x.dv})
      for (double v : *t) ASSERT_FALSE(std::isnan(v)) << s.name;
  }
};

TEST_P(MaskedRows, CausalBottomRightWithMoreQueriesThanKeys) {
  CaseSpec s = dense_spec("causal bottom-right Sq=100 Sk=37", 2, 100, 37, 2, 2, 64, 64, GetParam().dtype);
  s.options.causal = true;
  check_rows(s);
}

TEST_P(MaskedRows, TopLeftWindowLeftOnly) {
  CaseSpec s = dense_spec("top-left window (4, -1) Sq=90 Sk=40", 1, 90, 40, 4, 2, 64, 64, GetParam().dtype);
  s.options.align = CausalAlign::kTopLeft;
  s.options.window_left = 4;
  check_rows(s);
}

TEST_P(MaskedRows, BottomRightWindowRightOnly) {
  CaseSpec s = dense_spec("window (-1, 2) Sq=100 Sk=41", 1, 100, 41, 2, 1, 64, 64, GetParam().dtype);
  s.options.window_right = 2;
  check_rows(s);
}

TEST_P(MaskedRows, NarrowWindowLeavesKeysUnseen) {
  // Sq < Sk bottom-right with window (0, 0): rows see one key each; keys 0..Sk-Sq-1 are unseen.
  CaseSpec s = dense_spec("window (0, 0) Sq=30 Sk=90", 2, 30, 90, 2, 2, 64, 64, GetParam().dtype);
  s.options.window_left = 0;
  s.options.window_right = 0;
  check_rows(s, false);
  CaseSpec t = dense_spec("top-left window (0, 0) Sq=70 Sk=20", 1, 70, 20, 2, 2, 64, 64, GetParam().dtype);
  t.options.align = CausalAlign::kTopLeft;
  t.options.window_left = 0;
  t.options.window_right = 0;
  check_rows(t);
}

TEST_P(MaskedRows, VarlenSequenceWithoutKeys) {
  CaseSpec s = dense_spec("varlen with Sk = 0 for one sequence", 0, 0, 0, 2, 2, 64, 64, GetParam().dtype);
  s.seqlens_q = {7, 13, 1};
  s.seqlens_k = {9, 0, 4};
  check_rows(s);
}

TEST_P(MaskedRows, WithDropoutSoftcapAlibi) {
  CaseSpec s = dense_spec("causal Sq=80 Sk=30 + dropout, softcap, ALiBi", 2, 80, 30, 2, 2, 64, 64, GetParam().dtype);
  s.options.causal = true;
  s.options.dropout_p = 0.17;
  s.options.softcap = 10.0;
  s.alibi = check::Alibi::kPerHead;
  check_rows(s);
}

INSTANTIATE_TEST_SUITE_P(Targets, MaskedRows, ::testing::ValuesIn(targets_present()), target_name);

}  // namespace
}  // namespace flashtrain::testing
