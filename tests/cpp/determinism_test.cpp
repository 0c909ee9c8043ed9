// AttentionOptions::deterministic: two runs on the same inputs give bitwise-identical outputs
// and gradients. Shapes span several query and key tiles and use GQA, where dk/dv of one KV head
// collect contributions of several query heads and tiles: the place an unordered reduction
// would show.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.h"

namespace flashtrain::testing {
namespace {

class Deterministic : public ::testing::TestWithParam<Target> {};

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST_P(Deterministic, GradientsBitwiseIdenticalAcrossRuns) {
  check::CaseSpec s = dense_spec("deterministic GQA causal dropout", 1, 150, 263, 4, 1, 64, 64,
                                 GetParam().dtype);
  s.options.deterministic = true;
  s.options.causal = true;
  s.options.dropout_p = 0.17;
  s.options.seed = 7;
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, GetParam().backend);
  check::Case c(s);
  const check::Outputs first = c.run(GetParam().backend);
  const check::Outputs second = c.run(GetParam().backend);
  EXPECT_TRUE(bitwise_equal(first.out, second.out));
  EXPECT_TRUE(bitwise_equal(first.lse, second.lse));
  EXPECT_TRUE(bitwise_equal(first.dq, second.dq));
  EXPECT_TRUE(bitwise_equal(first.dk, second.dk));
  EXPECT_TRUE(bitwise_equal(first.dv, second.dv));
  // And the result is right, not just repeatable.
  expect_case_passes(s, GetParam().backend);
}

INSTANTIATE_TEST_SUITE_P(Targets, Deterministic, ::testing::ValuesIn(targets_present()), target_name);

}  // namespace
}  // namespace flashtrain::testing
