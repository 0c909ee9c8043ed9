// The CPU forward's AMX path (src/cpu/amx.h, opt-in with FLASHTRAIN_CPU_AMX=1).
//
// Everywhere: the VNNI packing, the block product on EmulatedTiles against a plain product, the
// whole AMX forward with emulated tile instructions (FLASHTRAIN_CPU_AMX=emulate) against the
// float64 reference with DESIGN.md §4's rule, and that fp32 inputs never take the path.
// On a CPU with AMX: the hardware block product matches the emulation, and the forward
// with FLASHTRAIN_CPU_AMX=1 passes the same accuracy cases. Without AMX: the opt-in silently gives
// the default path's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "cpu/amx.h"
#include "cpu/amx_tiles.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

using check::Alibi;
using check::CaseSpec;
using check::Layout;
using cpu::AmxMode;

// FLASHTRAIN_CPU_AMX for one scope (nullptr: unset).
class ScopedAmxEnv : public ScopedEnv {
 public:
  explicit ScopedAmxEnv(const char* value) : ScopedEnv("FLASHTRAIN_CPU_AMX", value) {}
};

// Random bf16-exact values in [-2, 2).
std::vector<float> bf16_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = bf16_to_float(float_to_bf16(dist(gen)));
  return x;
}

TEST(CpuAmxPacking, VnniLayoutAndZeroPadding) {
  // B [k_valid = 37][n_valid = 21] read both row-major and through a transposed view.
  const int64_t kv = 37, nv = 21, kp = 64, np = 32, ld = 40;
  const std::vector<float> src = bf16_values(kv * ld, 7);
  for (const bool transposed : {false, true}) {
    const int64_t ks = transposed ? 1 : ld, ns = transposed ? ld : 1;
    std::vector<uint16_t> dst(kp * np, 0xffff);
    cpu::pack_vnni(src.data(), ks, ns, kv, nv, kp, np, dst.data());
    for (int64_t k = 0; k < kp; ++k)
      for (int64_t n = 0; n < np; ++n) {
        const uint16_t got = dst[((k / 2) * np + n) * 2 + k % 2];
        const uint16_t want = k < kv && n < nv ? float_to_bf16(src[k * ks + n * ns]) : 0;
        ASSERT_EQ(got, want) << "k " << k << " n " << n << (transposed ? " (transposed)" : "");
      }
  }
}

// C (+)= A B in plain C++ summed over k in order, from the row-major A and the unpacked B.
std::vector<float> plain_product(const std::vector<float>& c0, bool accumulate, const std::vector<uint16_t>& a,
                                 int64_t lda, const std::vector<float>& b, int64_t ldb, int64_t rows,
                                 int64_t k_pad, int64_t ncols, int64_t ldc) {
  std::vector<float> c = c0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < ncols; ++j) {
      float acc = accumulate ? c0[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < k_pad; ++k) acc += bf16_to_float(a[i * lda + k]) * b[k * ldb + j];
      c[i * ldc + j] = acc;
    }
  return c;
}

struct BlockShape {
  int64_t rows, k_valid, ncols;
  bool accumulate;
};

// Operands of one block product: A [rows][lda] bf16, B [k_valid][ncols] (zero rows up to k_pad)
// packed to VNNI, C [rows][ldc] with a margin that must stay untouched.
struct BlockOperands {
  int64_t k_pad, lda, ldc, ldb;
  std::vector<uint16_t> a, b_vnni;
  std::vector<float> b, c0;
  explicit BlockOperands(const BlockShape& s)
      : k_pad(cpu::amx_k_padded(s.k_valid)), lda(k_pad + 32), ldc(s.ncols + 16), ldb(2 * s.ncols) {
    const std::vector<float> af = bf16_values(s.rows * lda, 11);
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t k = 0; k < lda; ++k) a.push_back(k < s.k_valid ? float_to_bf16(af[i * lda + k]) : 0);
    b = bf16_values(k_pad * s.ncols, 13);
    std::fill(b.begin() + s.k_valid * s.ncols, b.end(), 0.0f);
    b_vnni.resize(k_pad * s.ncols);
    cpu::pack_vnni(b.data(), s.ncols, 1, s.k_valid, s.ncols, k_pad, s.ncols, b_vnni.data());
    c0 = bf16_values(s.rows * ldc, 17);
  }
};

const BlockShape kBlockShapes[] = {
    {64, 64, 64, false}, {64, 40, 48, true}, {32, 192, 16, false}, {64, 96, 80, true}, {32, 8, 32, true}};

TEST(CpuAmxPacking, EmulatedBlockProductEqualsPlainProduct) {
  for (const BlockShape& s : kBlockShapes) {
    BlockOperands o(s);
    std::vector<float> c = o.c0;
    cpu::EmulatedTiles tiles;
    cpu::amx_gemm(tiles, c.data(), o.ldc, s.accumulate, o.a.data(), o.lda, o.b_vnni.data(), o.ldb, s.rows,
                  o.k_pad, s.ncols);
    const std::vector<float> want =
        plain_product(o.c0, s.accumulate, o.a, o.lda, o.b, s.ncols, s.rows, o.k_pad, s.ncols, o.ldc);
    EXPECT_EQ(c, want) << "rows " << s.rows << " k " << s.k_valid << " ncols " << s.ncols
                       << (s.accumulate ? " accumulate" : "");
  }
}

TEST(CpuAmxPacking, RoundToBf16MatchesScalar) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "the vector rounding needs AVX-512F";
  std::vector<float> x = bf16_values(45, 19);
  const float inf = std::numeric_limits<float>::infinity();
  // Ties to even both ways, NaN (quieted, sign kept), infinities, the largest finite, a denormal.
  for (const uint32_t bits : {0x3f808000u, 0x3f818000u, 0x7fa00001u, 0xffc00000u, 0x7f7fffffu, 0x00000001u})
    x.push_back(bits_to_float(bits));
  x.push_back(inf);
  x.push_back(-inf);
  std::vector<uint16_t> got(x.size()), want(x.size());
  cpu::round_to_bf16_avx512(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) want[i] = float_to_bf16(x[i]);
  EXPECT_EQ(got, want);
}

TEST(CpuAmxHardware, BlockProductMatchesEmulation) {
  if (!cpu::amx_available()) GTEST_SKIP() << "this CPU (or kernel, or compiler) has no AMX";
  for (const BlockShape& s : kBlockShapes) {
    BlockOperands o(s);
    std::vector<float> hw = o.c0, emulated = o.c0;
    {
      const cpu::AmxThread on(true);
      cpu::amx_gemm_tiles(hw.data(), o.ldc, s.accumulate, o.a.data(), o.lda, o.b_vnni.data(), o.ldb, s.rows,
                          o.k_pad, s.ncols);
    }
    cpu::EmulatedTiles tiles;
    cpu::amx_gemm(tiles, emulated.data(), o.ldc, s.accumulate, o.a.data(), o.lda, o.b_vnni.data(), o.ldb,
                  s.rows, o.k_pad, s.ncols);
    // The SDM states TDPBF16PS as the emulation does (two exact products added in order, each
    // rounded to fp32); the bound allows a different internal summation of a pair all the same.
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t j = 0; j < o.ldc; ++j) {
        double magnitude = j < s.ncols && s.accumulate ? std::fabs(o.c0[i * o.ldc + j]) : 0.0;
        for (int64_t k = 0; j < s.ncols && k < o.k_pad; ++k)
          magnitude += std::fabs(bf16_to_float(o.a[i * o.lda + k]) * o.b[k * s.ncols + j]);
        const double bound = 2.0 * o.k_pad * std::numeric_limits<float>::epsilon() * magnitude;
        ASSERT_LE(std::fabs(hw[i * o.ldc + j] - emulated[i * o.ldc + j]), bound)
            << "rows " << s.rows << " k " << s.k_valid << " ncols " << s.ncols << " at (" << i << ", " << j
            << "): hardware " << hw[i * o.ldc + j] << ", emulation " << emulated[i * o.ldc + j];
      }
  }
}

// The forward accuracy cases of accuracy_test.cpp, bf16: odd sizes, strides, varlen, GQA, head
// dims, masks, softcap, ALiBi, dropout, large logits.
std::vector<CaseSpec> forward_cases() {
  const DType bf16 = DType::kBFloat16;
  std::vector<CaseSpec> v;
  const CaseSpec base = dense_spec("plain", 2, 77, 131, 2, 2, 64, 64, bf16);
  v.push_back(base);
  v.push_back(dense_spec("Sq > Sk", 1, 150, 67, 3, 3, 64, 64, bf16));
  v.push_back(dense_spec("Sq = 1", 2, 1, 97, 2, 2, 64, 64, bf16));
  v.push_back(dense_spec("Sk = 1", 2, 45, 1, 2, 2, 64, 64, bf16));
  v.push_back(dense_spec("Dqk 192 / Dv 128", 1, 61, 93, 2, 1, 192, 128, bf16));
  v.push_back(dense_spec("Dqk 40 / Dv 24", 2, 53, 71, 4, 2, 40, 24, bf16));
  v.push_back(dense_spec("D = 8", 2, 41, 59, 2, 2, 8, 8, bf16));
  v.push_back(dense_spec("D = 33", 1, 41, 59, 2, 1, 33, 33, bf16));
  v.push_back(dense_spec("D = 128", 1, 130, 140, 2, 2, 128, 128, bf16));
  CaseSpec s = dense_spec("packed qkv", 2, 83, 83, 4, 4, 64, 64, bf16);
  s.layout = Layout::kPackedQKV;
  v.push_back(s);
  s = base;
  s.name = "padded causal GQA";
  s.layout = Layout::kPadded;
  s.options.causal = true;
  s.heads_q = 4;
  s.heads_k = 1;
  v.push_back(s);
  s = base;
  s.name = "varlen causal top-left";
  s.seqlens_q = {37, 0, 1, 70, 5};
  s.seqlens_k = {50, 3, 1, 66, 0};
  s.options.causal = true;
  s.options.align = CausalAlign::kTopLeft;
  v.push_back(s);
  for (const auto& [sq, sk] : {std::pair<int64_t, int64_t>{61, 140}, {140, 61}}) {
    s = dense_spec("causal bottom-right Sq=" + std::to_string(sq), 2, sq, sk, 2, 2, 64, 64, bf16);
    s.options.causal = true;
    v.push_back(s);
  }
  s = base;
  s.name = "window (23, 5)";
  s.options.window_left = 23;
  s.options.window_right = 5;
  v.push_back(s);
  s = base;
  s.name = "softcap 5";
  s.options.softcap = 5.0;
  s.q_std = s.k_std = 3.0;
  v.push_back(s);
  s = base;
  s.name = "ALiBi [B, Hq] causal";
  s.alibi = Alibi::kPerBatchHead;
  s.options.causal = true;
  v.push_back(s);
  s = base;
  s.name = "dropout 0.17 causal GQA varlen";
  s.heads_q = 4;
  s.seqlens_q = {19, 1, 66};
  s.seqlens_k = {40, 2, 66};
  s.options.causal = true;
  s.options.dropout_p = 0.17;
  s.options.seed = 0x1234567890abcdefull;
  s.options.offset = 0x0000000500000007ull;
  v.push_back(s);
  s = base;
  s.name = "top-left causal, window 17, softcap 30, ALiBi, dropout 0.1, MQA, padded";
  s.heads_q = 4;
  s.heads_k = 1;
  s.options = {};
  s.options.causal = true;
  s.options.align = CausalAlign::kTopLeft;
  s.options.window_left = 17;
  s.options.softcap = 30.0;
  s.options.dropout_p = 0.1;
  s.options.seed = 5;
  s.alibi = Alibi::kPerHead;
  s.layout = Layout::kPadded;
  v.push_back(s);
  s = base;
  s.name = "logits ~1e3";
  s.q_std = s.k_std = 30.0;
  v.push_back(s);
  return v;
}

// Each case passes the §4 rule (forward and the backward that reads its lse) with the AMX path
// on, and repeats bit for bit.
void expect_amx_forward_passes(const char* env) {
  const ScopedAmxEnv amx(env);
  for (const CaseSpec& spec : forward_cases()) {
    check::Case c(spec);
    const check::CaseResult r = c.evaluate(Backend::kCPU);
    EXPECT_TRUE(r.pass) << spec.name << " with FLASHTRAIN_CPU_AMX=" << env << ":\n" << r.describe();
    const check::Outputs first = c.run(Backend::kCPU), second = c.run(Backend::kCPU);
    EXPECT_EQ(first.out, second.out) << spec.name << ": out differs between two runs";
    EXPECT_EQ(first.lse, second.lse) << spec.name << ": lse differs between two runs";
  }
}

TEST(CpuAmxForward, EmulatedTilesPassAccuracyCases) {
  {
    const ScopedAmxEnv amx("emulate");
    ASSERT_EQ(cpu::amx_mode(), AmxMode::kEmulated);
  }
  expect_amx_forward_passes("emulate");
}

TEST(CpuAmxForward, HardwarePassesAccuracyCases) {
  if (!cpu::amx_available()) GTEST_SKIP() << "this CPU (or kernel, or compiler) has no AMX";
  {
    const ScopedAmxEnv amx("1");
    ASSERT_EQ(cpu::amx_mode(), AmxMode::kHardware);
  }
  expect_amx_forward_passes("1");
}

// The path changes the bits of a bf16 forward (exact products, P rounded to bf16): comparing
// against the default (FLASHTRAIN_CPU_AMX unset) shows whether it ran.
bool same_forward(const CaseSpec& spec, const char* env) {
  check::Case c(spec);
  check::Outputs plain, opted;
  {
    const ScopedAmxEnv unset(nullptr);
    plain = c.run(Backend::kCPU);
  }
  {
    const ScopedAmxEnv amx(env);
    opted = c.run(Backend::kCPU);
  }
  return plain.out == opted.out && plain.lse == opted.lse;
}

TEST(CpuAmxForward, OptInFallsBackWithoutAmx) {
  CaseSpec s = dense_spec("plain", 2, 77, 131, 2, 2, 64, 64, DType::kBFloat16);
  s.backward = false;
  EXPECT_FALSE(same_forward(s, "emulate")) << "the emulated AMX path did not run";
  if (cpu::amx_available()) {
    EXPECT_FALSE(same_forward(s, "1")) << "FLASHTRAIN_CPU_AMX=1 on an AMX CPU did not take the path";
  } else {
    EXPECT_TRUE(same_forward(s, "1")) << "FLASHTRAIN_CPU_AMX=1 without AMX must give the default bits";
  }
  EXPECT_TRUE(same_forward(s, "0"));
}

TEST(CpuAmxForward, Fp32AndHighPrecisionNeverUseIt) {
  CaseSpec s = dense_spec("fp32", 2, 77, 131, 2, 2, 64, 64, DType::kFloat32);
  s.backward = false;
  EXPECT_TRUE(same_forward(s, "emulate"));
  EXPECT_TRUE(same_forward(s, "1"));
  s = dense_spec("bf16 Precision::kHigh", 2, 77, 131, 2, 2, 64, 64, DType::kBFloat16);
  s.backward = false;
  s.options.precision = Precision::kHigh;
  EXPECT_TRUE(same_forward(s, "emulate"));
}

}  // namespace
}  // namespace flashtrain::testing
