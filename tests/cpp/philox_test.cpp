// src/common/philox.h: Philox4x32-10 against the Random123 known-answer vectors, and the
// statistics of the dropout keep decision built on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "common/philox.h"

namespace flashtrain {
namespace {

struct KnownAnswer {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expect[4];
};

// Published with Random123 (kat_vectors, philox4x32 with 10 rounds).
constexpr KnownAnswer kKnownAnswers[] = {
    {{0u, 0u, 0u, 0u}, {0u, 0u}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& ka : kKnownAnswers) {
    const Philox4 r =
        philox4x32_10(ka.ctr[0], ka.ctr[1], ka.ctr[2], ka.ctr[3], ka.key[0], ka.key[1]);
    for (int w = 0; w < 4; ++w)
      EXPECT_EQ(r.x[w], ka.expect[w]) << "word " << w << " of ctr " << std::hex << ka.ctr[0];
  }
}

TEST(Philox, DropoutThresholdIsFloorOfPTimes2To32) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.17), static_cast<uint32_t>(std::floor(0.17 * 4294967296.0)));
}

TEST(Philox, KeepMatchesTheStatedCounterLayout) {
  // attention.h / philox.h: counter {j / 4, i, bh, lo32(offset)}, key {lo32(seed),
  // hi32(seed) ^ hi32(offset)}, word j % 4.
  const uint64_t seed = 0x0123456789abcdefull, offset = 0x0000000300000011ull;
  const uint32_t threshold = dropout_threshold(0.17);
  for (uint32_t j = 0; j < 11; ++j) {
    const Philox4 r = philox4x32_10(j / 4, 5, 7, 0x11u, 0x89abcdefu, 0x01234567u ^ 0x3u);
    EXPECT_EQ(philox_keep(seed, offset, 7, 5, j, threshold), r.x[j % 4] >= threshold) << "j " << j;
  }
}

TEST(Philox, KeptFractionIsOneMinusP) {
  constexpr double kP = 0.17;
  constexpr uint32_t kRows = 512, kCols = 1024;  // 524288 draws: std of the fraction ~5e-4
  const uint32_t threshold = dropout_threshold(kP);
  for (const uint64_t offset : {0ull, 12345ull}) {
    int64_t kept = 0;
    for (uint32_t i = 0; i < kRows; ++i)
      for (uint32_t j = 0; j < kCols; ++j) kept += philox_keep(42, offset, 3, i, j, threshold);
    const double fraction = static_cast<double>(kept) / (kRows * kCols);
    EXPECT_NEAR(fraction, 1.0 - kP, 3e-3) << "offset " << offset;
  }
}

TEST(Philox, SeedAndOffsetChangeTheMask) {
  const uint32_t threshold = dropout_threshold(0.5);
  int differ_seed = 0, differ_offset = 0;
  constexpr int kDraws = 256;
  for (uint32_t j = 0; j < kDraws; ++j) {
    const bool base = philox_keep(1, 0, 0, 0, j, threshold);
    differ_seed += base != philox_keep(2, 0, 0, 0, j, threshold);
    differ_offset += base != philox_keep(1, 1, 0, 0, j, threshold);
  }
  // Independent masks at p = 0.5 differ in half the draws; 64 is ~8 sigma below that.
  EXPECT_GT(differ_seed, 64);
  EXPECT_GT(differ_offset, 64);
}

}  // namespace
}  // namespace flashtrain
