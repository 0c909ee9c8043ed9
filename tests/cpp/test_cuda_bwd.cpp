// CUDA backward at sizes the shared suite does not reach: several KV tiles per sequence and several
// Q tiles per KV tile (so the inner loop, the double-buffered Q/dO stages and the dQ atomics of
// many blocks all run), every built head-dim pair, the split query-head group (dK/dV through fp32
// atomics) and the deterministic semaphore order with causal / window masks and varlen, and the
// rotated order of self-attention.
// GPU only: skipped when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include "api/validate.h"
#include "cuda/sm90/bwd_args_sm90.h"
#include "cuda/sm90/launch.h"
#endif

namespace flashtrain::testing {
namespace {

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// dK and dV bit for bit, dQ (whose fp32 atomics have no order) to rounding: a change that only
// reorders blocks or splits their loads.
void expect_same_dkdv_close_dq(const check::Outputs& ref, const check::Outputs& out, const std::string& what) {
  EXPECT_TRUE(bitwise_equal(ref.dk, out.dk)) << what << ": dk differs (max " << max_abs_diff(ref.dk, out.dk) << ")";
  EXPECT_TRUE(bitwise_equal(ref.dv, out.dv)) << what << ": dv differs (max " << max_abs_diff(ref.dv, out.dv) << ")";
  EXPECT_LE(max_abs_diff(ref.dq, out.dq), 1e-2 * max_abs(ref.dq)) << what << ": dq";
}

// dq, dk and dv of a repeated run bit for bit the first run's; `what` names the run in failures.
void expect_same_gradients(const check::Outputs& first, const check::Outputs& again, const std::string& what) {
  EXPECT_TRUE(bitwise_equal(first.dq, again.dq)) << what << ": dq differs";
  EXPECT_TRUE(bitwise_equal(first.dk, again.dk)) << what << ": dk differs";
  EXPECT_TRUE(bitwise_equal(first.dv, again.dv)) << what << ": dv differs";
}

class CudaBackward : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Every head-dim pair with causal GQA, softcap and dropout over several tiles in both directions.
TEST_P(CudaBackward, EveryHeadDimPairMultiTile) {
  const std::vector<std::pair<int, int>> pairs = {{64, 64}, {96, 96}, {128, 128}, {192, 128}, {192, 192}, {256, 256}};
  int ran = 0;
  for (const auto& [dqk, dv] : pairs) {
    check::CaseSpec s = dense_spec("Dqk " + std::to_string(dqk) + " / Dv " + std::to_string(dv) +
                                       ": causal GQA softcap dropout, 301 x 389",
                                   1, 301, 389, 4, 2, dqk, dv, GetParam());
    s.options.causal = true;
    s.options.softcap = 15.0;
    s.options.dropout_p = 0.1;
    s.options.seed = 1234;
    if (!cuda_head_dim_built(s.dim_qk)) continue;
    expect_case_passes(s, Backend::kCUDA);
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no head dim pair is built";
}

// MQA with one KV tile per sequence: the grid is tiny, so the query-head group is split over
// blocks and dK/dV go through the fp32 accumulators and the postprocess.
TEST_P(CudaBackward, SplitQueryHeadGroup) {
  check::CaseSpec s = dense_spec("MQA Hq=16 Hk=1, split group", 1, 200, 100, 16, 1, 64, 64, GetParam());
  s.alibi = check::Alibi::kPerBatchHead;
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, Backend::kCUDA);
  expect_case_passes(s, Backend::kCUDA);
}

// Deterministic mode across many KV tiles that wait on each other's dQ turn: sliding window
// (tiles reach Q tiles from a window-dependent first tile), top-left causal and varlen.
TEST_P(CudaBackward, DeterministicWindowVarlenBitwise) {
  check::CaseSpec s = dense_spec("deterministic window varlen GQA", 1, 1, 1, 6, 2, 64, 64, GetParam());
  s.seqlens_q = {517, 3, 260};
  s.seqlens_k = {700, 0, 131};
  s.options.deterministic = true;
  s.options.window_left = 150;
  s.options.window_right = 40;
  s.options.align = CausalAlign::kTopLeft;
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, Backend::kCUDA);
  check::Case c(s);
  const check::Outputs first = c.run(Backend::kCUDA);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const check::Outputs again = c.run(Backend::kCUDA);
    expect_same_gradients(first, again, "repeat " + std::to_string(repeat));
  }
  expect_case_passes(s, Backend::kCUDA);
}

// Deterministic self-attention, the shape the rotated dQ schedule takes (tile_range.h): equal
// lengths, no window, causal or not, several Q and KV tiles (S not a multiple of either tile),
// GQA; the sm90 head dims (64, 128, 256) and the sm80-only ones (96, 192). Bitwise repeatable and
// accurate.
TEST_P(CudaBackward, DeterministicSelfAttentionBitwise) {
  int ran = 0;
  for (int d : {64, 128, 96, 192, 256}) {
    for (bool causal : {false, true}) {
      // 333 rows: 6 (D 128) or 3 (D 64) Q tiles over 3 KV tiles, so walks wrap; small enough for
      // compute-sanitizer racecheck (scripts/gpu_check.sh).
      check::CaseSpec s = dense_spec("deterministic self-attention D " + std::to_string(d) +
                                         (causal ? " causal" : "") + ", 2 x 333, GQA 4/2",
                                     2, 333, 333, 4, 2, d, d, GetParam());
      s.options.deterministic = true;
      s.options.causal = causal;
      if (!cuda_head_dim_built(s.dim_qk)) continue;
      check::Case c(s);
      const check::Outputs first = c.run(Backend::kCUDA);
      for (int repeat = 0; repeat < 3; ++repeat) {
        const check::Outputs again = c.run(Backend::kCUDA);
        expect_same_gradients(first, again, s.name + ", repeat " + std::to_string(repeat));
      }
      expect_case_passes(s, Backend::kCUDA);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no head dim is built";
}

// Deterministic causal self-attention with more key tiles in one head than a Hopper has SMs (160;
// the sm90 backward runs a block an SM): the rotated walk, taken there without co-residency since
// its waits all point to earlier-launched blocks (dq_schedule.h, rotated_dq_waits_point_up),
// finishes, repeats bit for bit and gives the default mode's gradients to rounding (too long for
// the float64 reference; the shorter cases above check that).
TEST_P(CudaBackward, DeterministicCausalBeyondOneWave) {
  int ran = 0;
  for (int d : {64, 256}) {
    const int64_t len = 160 * (d == 256 ? 64 : 128);  // the sm90 key tile: 64 rows at D 256, else 128
    check::CaseSpec s = dense_spec("deterministic causal D " + std::to_string(d) + ", 1 x " + std::to_string(len),
                                   1, len, len, 1, 1, d, d, GetParam());
    s.options.causal = true;
    if (!cuda_head_dim_built(s.dim_qk)) continue;
    const check::Outputs fast = check::Case(s).run(Backend::kCUDA);
    s.options.deterministic = true;
    check::Case c(s);
    const check::Outputs first = c.run(Backend::kCUDA);
    const check::Outputs again = c.run(Backend::kCUDA);
    expect_same_gradients(first, again, s.name + ", repeat");
    for (const auto& [name, x, y] : {std::tuple{"dq", &first.dq, &fast.dq}, std::tuple{"dk", &first.dk, &fast.dk},
                                     std::tuple{"dv", &first.dv, &fast.dv}}) {
      // Both round fp32 sums of the same terms to 16 bits: a few units of the last place of the
      // largest values; a missed or doubled key tile moves far more.
      EXPECT_LE(max_abs_diff(*x, *y), 0.02 * max_abs(*y)) << s.name << ": " << name << " against the default mode";
    }
    ++ran;
  }
  EXPECT_GT(ran, 0) << "neither D 64 nor D 256 is built";
}

// The shapes the sm90 backward runs (D 64, 128 and 256, no dropout or softcap), default mode: many
// steps per block, so both Q / dO stages are refilled several times by whichever warpgroup
// releases them second, and the dS buffers and dQ staging halves (D 256: the P^T / dS^T buffers)
// turn over while the other warpgroup may still be a step behind. Small enough for
// compute-sanitizer racecheck.
TEST_P(CudaBackward, Sm90ShapesMultiStep) {
  int ran = 0;
  for (int d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      check::CaseSpec s = dense_spec("D " + std::to_string(d) + (causal ? " causal" : "") + ", 1 x 520, GQA 4/2",
                                     1, 520, 520, 4, 2, d, d, GetParam());
      s.options.causal = causal;
      if (!cuda_head_dim_built(s.dim_qk)) continue;
      expect_case_passes(s, Backend::kCUDA);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no head dim is built";
}

// Blocks of one, two and three steps on the sm90 backward (one query head per key head, so a
// block's steps are its Q tiles; the sm90 kernel's Q tile is 128 rows at D 64 and 64 at D 128 and 256):
// the default kernel computes dQ of a step in the next one, so its first step's dQ GEMM is a
// dropped one and its last two steps' dQ are staged after the loop. Causal and deterministic
// variants too (under causal the blocks of one sequence have different step counts).
TEST_P(CudaBackward, Sm90FewStepsPerBlock) {
  int ran = 0;
  for (int d : {64, 128, 256}) {
    const int tile = d == 64 ? 128 : 64;
    for (int sq : {tile, 2 * tile, 3 * tile - 10}) {
      for (bool causal : {false, true}) {
        for (bool deterministic : {false, true}) {
          check::CaseSpec s = dense_spec("D " + std::to_string(d) + (causal ? " causal" : "") +
                                             (deterministic ? " deterministic" : "") + ", 2 x " + std::to_string(sq),
                                         2, sq, sq, 2, 2, d, d, GetParam());
          s.options.causal = causal;
          s.options.deterministic = deterministic;
          if (!cuda_head_dim_built(s.dim_qk)) continue;
          expect_case_passes(s, Backend::kCUDA);
          ++ran;
        }
      }
    }
  }
  EXPECT_GT(ran, 0) << "no head dim is built";
}

// The split-D sm90 backward (D 256) on the masks and shapes the key-split kernels meet in the
// Accuracy suite at D 64: Sq != Sk both ways, a length of 1, both causal alignments, a sliding
// window (deterministic too), GQA, packed and padded strides.
std::vector<check::CaseSpec> split_d_cases(DType dtype) {
  const auto spec = [&](const std::string& name, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hk) {
    return dense_spec("D 256 " + name, b, sq, sk, hq, hk, 256, 256, dtype);
  };
  std::vector<check::CaseSpec> cases = {spec("Sq > Sk", 1, 150, 67, 3, 3), spec("Sq = 1", 2, 1, 97, 2, 2),
                                        spec("Sk = 1", 2, 45, 1, 2, 2)};
  for (const CausalAlign align : {CausalAlign::kBottomRight, CausalAlign::kTopLeft}) {
    for (const auto& [sq, sk] : {std::pair<int64_t, int64_t>{77, 131}, {131, 77}}) {
      check::CaseSpec s = spec(std::string("causal ") + (align == CausalAlign::kTopLeft ? "top-left" : "bottom-right") +
                                   ", " + std::to_string(sq) + " x " + std::to_string(sk),
                               2, sq, sk, 2, 2);
      s.options.causal = true;
      s.options.align = align;
      cases.push_back(s);
    }
  }
  for (bool deterministic : {false, true}) {
    check::CaseSpec s = spec(std::string("window (40, 10), GQA 4/2") + (deterministic ? ", deterministic" : ""), 2, 203,
                             190, 4, 2);
    s.options.window_left = 40;
    s.options.window_right = 10;
    s.options.deterministic = deterministic;
    cases.push_back(s);
  }
  check::CaseSpec packed = spec("packed qkv", 2, 83, 83, 4, 4);
  packed.layout = check::Layout::kPackedQKV;
  cases.push_back(packed);
  check::CaseSpec padded = spec("padded, causal, MQA", 2, 77, 131, 2, 1);
  padded.layout = check::Layout::kPadded;
  padded.options.causal = true;
  cases.push_back(padded);
  return cases;
}

// FLASHTRAIN_BWD_D256 for the scope of one test.
class BwdD256Env : public ScopedEnv {
 public:
  explicit BwdD256Env(const char* value) : ScopedEnv("FLASHTRAIN_BWD_D256", value) {}
};

TEST_P(CudaBackward, Sm90SplitDMasksAndShapes) {
  const std::vector<check::CaseSpec> cases = split_d_cases(GetParam());
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(cases.front(), Backend::kCUDA);
  BwdD256Env split("split");  // D 256: the split-D kernel (the wide one is the default in both modes)
  for (const check::CaseSpec& s : cases) expect_case_passes(s, Backend::kCUDA);
}

// FLASHTRAIN_BWD_CLUSTER for the scope of one run.
class BwdClusterEnv : public ScopedEnv {
 public:
  explicit BwdClusterEnv(const char* value) : ScopedEnv("FLASHTRAIN_BWD_CLUSTER", value) {}
};

// D 256's cluster pairs (bwd_split_kernel_sm90.h) against single blocks (FLASHTRAIN_BWD_CLUSTER=
// off), both the pairs that share the Q / dO loads only (=loads) and those that also sum dQ (=dq),
// on the shapes where a pair's blocks differ: an odd key-tile count (the pair's second block past
// the keys, so no dQ sum), causal (the second tile walks one fully masked Q tile more; the band
// order pairs tiles), a window (the pair walks the union of both tiles' Q tiles), one key, and
// varlen with an empty and a short sequence (pairs wholly or half past their sequence). A block
// adds zeros for the extra steps and keeps its order of the others, so dK and dV match bit for bit
// (one head per KV head: no split group, whose fp32 atomics have no order); dQ's atomics have no
// order either, so dQ matches to rounding. Every run also passes the float64 comparison.
std::vector<check::CaseSpec> cluster_pair_cases(DType dtype) {
  auto spec = [&](const std::string& name, int64_t b, int64_t sq, int64_t sk, int64_t h) {
    return dense_spec("D 256 " + name, b, sq, sk, h, h, 256, 256, dtype);
  };
  std::vector<check::CaseSpec> cases = {spec("5 key tiles, 2 x 300 x 300", 2, 300, 300, 2),
                                        spec("one key, 2 x 45 x 1", 2, 45, 1, 2)};
  check::CaseSpec causal = spec("causal, 1 x 333 x 333", 1, 333, 333, 3);
  causal.options.causal = true;
  cases.push_back(causal);
  check::CaseSpec window = spec("window (40, 10), 2 x 203 x 190", 2, 203, 190, 2);
  window.options.window_left = 40;
  window.options.window_right = 10;
  cases.push_back(window);
  check::CaseSpec varlen = spec("varlen causal top-left {517, 3, 260} x {700, 0, 131}", 1, 1, 1, 2);
  varlen.seqlens_q = {517, 3, 260};
  varlen.seqlens_k = {700, 0, 131};
  varlen.options.causal = true;
  varlen.options.align = CausalAlign::kTopLeft;
  cases.push_back(varlen);
  return cases;
}

TEST_P(CudaBackward, Sm90ClusterPairMatchesSingleBlocks) {
  const std::vector<check::CaseSpec> cases = cluster_pair_cases(GetParam());
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(cases.front(), Backend::kCUDA);
  BwdD256Env split("split");
  for (const check::CaseSpec& s : cases) {
    check::Case c(s);
    check::Outputs single;
    for (const char* mode : {"off", "loads", "dq"}) {
      BwdClusterEnv env(mode);
      const check::Outputs out = c.run(Backend::kCUDA);
      expect_case_passes(s, Backend::kCUDA);
      if (std::strcmp(mode, "off") == 0) {
        single = out;
        continue;
      }
      expect_same_dkdv_close_dq(single, out, s.name + ", " + mode);
    }
  }
}

// Under a causal-style mask the default backward launches its key tiles band by band, tile-major
// within a band (bwd_block_coords; FLASHTRAIN_BWD_BAND sets the units a band, auto:
// bwd_band_units' rule). The band only reorders the blocks: 1, 2 and 5 units a band over 6 (a partial last
// band) give dK and dV bit for bit as auto (one query head per KV head: each block sums its own
// steps in its walk's order) and dQ to rounding (its atomics have no order), every run within
// DESIGN.md §4 of float64; each head dim built (D 256 on its default, the wide kernel).
TEST_P(CudaBackward, Sm90BandOnlyReordersBlocks) {
  const std::vector<int64_t> dims = cuda_head_dims_built_of({64, 128, 256});
  if (dims.empty()) GTEST_SKIP() << "none of head dims 64, 128, 256 is built";
  for (int64_t d : dims) {
    check::CaseSpec s = dense_spec("causal 2 x 333 x 333, 3 heads, D " + std::to_string(d), 2, 333, 333, 3, 3, d, d,
                                   GetParam());
    s.options.causal = true;
    check::Case c(s);
    check::Outputs first;
    for (const char* band : {"auto", "1", "2", "5"}) {
      const ScopedEnv env("FLASHTRAIN_BWD_BAND", band);
      expect_case_passes(s, Backend::kCUDA);
      const check::Outputs out = c.run(Backend::kCUDA);
      if (std::strcmp(band, "auto") == 0) {
        first = out;
        continue;
      }
      expect_same_dkdv_close_dq(first, out, s.name + ", band " + band);
    }
  }
}

#ifdef FLASHTRAIN_WITH_CUDA
// A FLASHTRAIN_BWD_BAND that is not auto or a positive number is refused, naming it, before the
// sm90 backward launches anything.
TEST(Sm90BackwardBand, BadOverrideRaisesNamingIt) {
  if (!hopper_present()) GTEST_SKIP() << "no compute capability 9.0 device";
  check::CaseSpec spec = dense_spec("bad_env", 1, 64, 64, 1, 1, 128, 128, DType::kBFloat16);
  spec.options.causal = true;
  check::Case c(spec);
  const check::Case::Views v = c.prepare(Backend::kCUDA);
  const Problem p = make_backward_problem(v.q, v.k, v.v, v.out, v.lse, v.dout, v.dq, v.dk, v.dv, v.options);
  for (const char* bad : {"0", "-2", "two", "3x"}) {
    const ScopedEnv env("FLASHTRAIN_BWD_BAND", bad);
    try {
      cuda::sm90::run_bwd(p, nullptr, nullptr);  // refused before any launch or workspace use
      ADD_FAILURE() << "FLASHTRAIN_BWD_BAND=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("FLASHTRAIN_BWD_BAND='") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

// The band rule (bwd_band_units) on the benchmark grid's causal shapes on an H100 (50 MiB of L2,
// B * S = 16k tokens, 2048 / D heads): D 128 keeps the L2 rule's bands; the wide D 256 kernel's
// minimum of 4 units replaces the rule's 1-2 at S 4k-16k (run 47: 1.02-1.05x its backward); an
// override is taken as given, and no band exceeds the units there are.
TEST(Sm90BackwardBand, RulePicksTheMeasuredBands) {
  using cuda::sm90::bwd_band_units;
  const double l2 = 50.0 * 1024 * 1024;
  const auto unit_bytes = [](int d, double s) { return d * (8.0 * s + 4.0 * s); };  // one query head a unit
  EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(128, 8192), 1, 32), 2);
  EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(128, 16384), 1, 16), 1);
  EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(128, 2048), 1, 128), 8);
  for (const int s : {4096, 8192, 16384}) {
    EXPECT_LT(bwd_band_units(0, l2, unit_bytes(256, s), 1, 16384 / s * 8), 4) << s;  // the L2 rule alone
    EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(256, s), 4, 16384 / s * 8), 4) << s;
  }
  EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(256, 2048), 4, 64), 4);
  EXPECT_EQ(bwd_band_units(0, l2, unit_bytes(256, 8192), 4, 3), 3);  // fewer units than the minimum
  EXPECT_EQ(bwd_band_units(2, l2, unit_bytes(256, 8192), 4, 16), 2);  // FLASHTRAIN_BWD_BAND=2
  EXPECT_EQ(bwd_band_units(100, l2, unit_bytes(64, 1024), 1, 16), 16);
}
#endif

// Deterministic D 256 as cluster pairs summing dQ (FLASHTRAIN_BWD_CLUSTER=dq, the default), whose
// pair takes each Q tile's dQ turn as one block of 128 keys, each block passing half of it on
// (bwd_split_kernel_sm90.h), against single blocks (off), on the pair test's shapes: the rotated
// walk without a mask and causal, an odd key-tile count (the pair's second block past the keys:
// the first passes the whole turn), a window and varlen (the wavefront), one key. Bitwise
// repeatable and within DESIGN.md §4 of float64. dK / dV are bit for bit the single blocks' except
// under the rotated walk without a mask (equal lengths, no window): there a pair starts both blocks
// on its first tile's diagonal Q tile, so its second block sums its Q tiles in another (wrapped)
// order than as a single block starting on its own; causal, that block's extra first step is a
// masked one adding zeros, so the order of the others holds.
TEST_P(CudaBackward, Sm90DeterministicClusterPairs) {
  std::vector<check::CaseSpec> cases = cluster_pair_cases(GetParam());
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(cases.front(), Backend::kCUDA);
  BwdD256Env split("split");
  for (check::CaseSpec& s : cases) {
    s.options.deterministic = true;
    check::Case c(s);
    check::Outputs single;
    for (const char* mode : {"off", "dq"}) {
      BwdClusterEnv env(mode);
      const check::Outputs first = c.run(Backend::kCUDA);
      const check::Outputs again = c.run(Backend::kCUDA);
      expect_same_gradients(first, again, s.name + ", " + mode + ", repeat");
      expect_case_passes(s, Backend::kCUDA);
      if (std::strcmp(mode, "off") == 0) {
        single = first;
        continue;
      }
      const bool rotated_unmasked = !s.options.causal && s.options.window_left < 0 && s.options.window_right < 0 &&
                                    s.seqlens_q.empty() && s.seqlen_q == s.seqlen_k;
      if (rotated_unmasked) {
        EXPECT_LE(max_abs_diff(single.dk, first.dk), 1e-2 * max_abs(single.dk)) << s.name << ": dk";
        EXPECT_LE(max_abs_diff(single.dv, first.dv), 1e-2 * max_abs(single.dv)) << s.name << ": dv";
      } else {
        EXPECT_TRUE(bitwise_equal(single.dk, first.dk)) << s.name << ": dk differs from the single blocks'";
        EXPECT_TRUE(bitwise_equal(single.dv, first.dv)) << s.name << ": dv differs from the single blocks'";
      }
      EXPECT_LE(max_abs_diff(single.dq, first.dq), 1e-2 * max_abs(single.dq)) << s.name << ": dq";
    }
  }
}

// Runs each case with FLASHTRAIN_BWD_D256=wide (bwd_wide_kernel_sm90.h, the kernel unless
// FLASHTRAIN_BWD_D256=split): within DESIGN.md §4 of float64, and deterministic
// cases bitwise repeatable.
void expect_wide_cases_pass(const std::vector<check::CaseSpec>& cases) {
  BwdD256Env env("wide");
  for (const check::CaseSpec& s : cases) {
    if (s.options.deterministic) {
      check::Case c(s);
      const check::Outputs first = c.run(Backend::kCUDA);
      const check::Outputs again = c.run(Backend::kCUDA);
      expect_same_gradients(first, again, s.name + ", repeat");
    }
    expect_case_passes(s, Backend::kCUDA);
  }
}

// D 256 with 80-key tiles on many steps per block (both Q stages and the one dO buffer refilled
// many times, the P / dS buffers turning over while the other warpgroup may be a step behind) and
// the deterministic turns of the rotated walk (self-attention), default and deterministic. Small
// enough for compute-sanitizer racecheck.
TEST_P(CudaBackward, Sm90WideKeyTilesMultiStep) {
  std::vector<check::CaseSpec> cases;
  for (bool deterministic : {false, true}) {
    for (bool causal : {false, true}) {
      check::CaseSpec s = dense_spec(std::string("D 256 wide") + (causal ? " causal" : "") +
                                         (deterministic ? " deterministic" : "") + ", 2 x 333, GQA 4/2",
                                     2, 333, 333, 4, 2, 256, 256, GetParam());
      s.options.causal = causal;
      s.options.deterministic = deterministic;
      cases.push_back(s);
    }
  }
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(cases.front(), Backend::kCUDA);
  expect_wide_cases_pass(cases);
}

// D 256 with 80-key tiles on the split-D and cluster-pair tests' shapes (masks of every kind,
// Sq != Sk both ways, a length of 1, GQA / MQA, packed and padded layouts, varlen with an empty and
// a short sequence), one to three steps a block, and the head chunks' atomic dK / dV; each also
// deterministic (the wavefront turns).
TEST_P(CudaBackward, Sm90WideKeyTilesShapes) {
  std::vector<check::CaseSpec> cases = split_d_cases(GetParam());
  for (const check::CaseSpec& s : cluster_pair_cases(GetParam())) cases.push_back(s);
  for (bool causal : {false, true}) {
    for (int sq : {64, 128, 182}) {
      check::CaseSpec few = dense_spec(std::string("D 256 few steps") + (causal ? " causal" : "") + ", 2 x " +
                                           std::to_string(sq),
                                       2, sq, sq, 2, 2, 256, 256, GetParam());
      few.options.causal = causal;
      cases.push_back(few);
    }
  }
  cases.push_back(dense_spec("D 256 MQA 16/1, split group, 1 x 200 x 100", 1, 200, 100, 16, 1, 256, 256, GetParam()));
  const size_t plain = cases.size();
  for (size_t i = 0; i < plain; ++i) {
    if (cases[i].options.deterministic) continue;
    check::CaseSpec det = cases[i];
    det.name += ", deterministic";
    det.options.deterministic = true;
    cases.push_back(det);
  }
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(cases.front(), Backend::kCUDA);
  expect_wide_cases_pass(cases);
}

// The sm90 backward's dK / dV epilogue (bwd_epilogue_sm90.h; D 256: bwd_wide_epilogue_sm90.h) on its two
// paths: into padded outputs (row and head strides not the dense ones, last key tile partial,
// padding checked untouched), and the fp32 atomics of a query-head group split over blocks (MQA on
// a tiny grid).
TEST_P(CudaBackward, Sm90DkDvEpilogue) {
  int ran = 0;
  for (int d : {64, 128, 256}) {
    check::CaseSpec padded = dense_spec("D " + std::to_string(d) + " padded, 2 x 300 x 170, GQA 4/2", 2, 300, 170,
                                        4, 2, d, d, GetParam());
    padded.layout = check::Layout::kPadded;
    check::CaseSpec split = dense_spec("D " + std::to_string(d) + " MQA 16/1, split group, 1 x 200 x 100", 1, 200,
                                       100, 16, 1, d, d, GetParam());
    for (check::CaseSpec* s : {&padded, &split}) {
      if (!cuda_head_dim_built(s->dim_qk)) continue;
      expect_case_passes(*s, Backend::kCUDA);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no head dim is built";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBackward, ::testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(check::dtype_short_name(info.param));
                         });

}  // namespace
}  // namespace flashtrain::testing
