// Dropout drops exactly the elements philox_keep() names, on every backend: with v[j] = e_j the
// output row is dropout(P) itself, so the mask can be read off out and compared element by
// element with the specification and with the reference.
#include <gtest/gtest.h>

#include <cmath>

#include "common/philox.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

class DropoutMask : public ::testing::TestWithParam<Target> {};

TEST_P(DropoutMask, EqualsPhiloxSpecAndReference) {
  constexpr double kP = 0.17;
  // Sk <= Dv so column j of P lands in out[..., j] alone.
  check::CaseSpec s = dense_spec("dropout mask", 2, 37, 61, 3, 3, 64, 64, GetParam().dtype);
  s.identity_v = true;
  s.backward = false;
  s.options.dropout_p = kP;
  s.options.seed = 0xfeedface12345678ull;
  s.options.offset = 0x0000000200000009ull;
  check::Case c(s);
  const check::Outputs x = c.run(GetParam().backend);
  const check::Outputs ref = c.run(Backend::kReference);
  const uint32_t threshold = dropout_threshold(kP);
  int64_t kept = 0, total = 0, mismatch_spec = 0, mismatch_ref = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seqlen_q; ++i)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t j = 0; j < s.seqlen_k; ++j) {
          const int64_t e = ((b * s.seqlen_q + i) * s.heads_q + h) * s.dim_v + j;
          const bool spec_keep = philox_keep(s.options.seed, s.options.offset,
                                             static_cast<uint32_t>(b * s.heads_q + h),
                                             static_cast<uint32_t>(i), static_cast<uint32_t>(j),
                                             threshold);
          // P > 0 everywhere (no mask, |logits| small), so out == 0 exactly when dropped.
          const bool backend_keep = x.out[e] != 0.0;
          mismatch_spec += backend_keep != spec_keep;
          mismatch_ref += backend_keep != (ref.out[e] != 0.0);
          kept += backend_keep;
          ++total;
        }
  EXPECT_EQ(mismatch_spec, 0) << "of " << total << " elements";
  EXPECT_EQ(mismatch_ref, 0) << "of " << total << " elements";
  // 13542 draws: the fraction's std is ~3.2e-3; 0.02 is ~6 sigma.
  EXPECT_NEAR(static_cast<double>(kept) / total, 1.0 - kP, 0.02);
}

INSTANTIATE_TEST_SUITE_P(Targets, DropoutMask, ::testing::ValuesIn(targets_present()), target_name);

}  // namespace
}  // namespace flashtrain::testing
