// Every rule of the input validation: bad input throws flashtrain::Error whose message names the
// argument and the values seen (DESIGN.md §4).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "flashtrain/attention.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtrain {
namespace {

// Passes when fn throws flashtrain::Error and its message contains every one of `parts`.
::testing::AssertionResult ThrowsMentioning(const std::function<void()>& fn,
                                            const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& part : parts)
      if (msg.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\":\n" << msg;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-flashtrain exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception was thrown";
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A valid fp32 problem (B=2, Sq=5, Sk=7, Hq=8, Hk=2, D=16); each test breaks one thing.
class Validation : public ::testing::Test {
 protected:
  static constexpr int64_t B = 2, Sq = 5, Sk = 7, Hq = 8, Hk = 2, D = 16;

  Validation()
      : q_(B * Sq * Hq * D, 0.5f), k_(B * Sk * Hk * D, 0.25f), v_(B * Sk * Hk * D, 1.0f),
        out_(B * Sq * Hq * D), lse_(B * Hq * Sq), dout_(B * Sq * Hq * D, 1.0f), dq_(q_.size()),
        dk_(k_.size()), dv_(v_.size()) {
    q = view(q_, {B, Sq, Hq, D});
    k = view(k_, {B, Sk, Hk, D});
    v = view(v_, {B, Sk, Hk, D});
    out = view(out_, {B, Sq, Hq, D});
    lse = view(lse_, {B, Hq, Sq});
    dout = view(dout_, {B, Sq, Hq, D});
    dq = view(dq_, {B, Sq, Hq, D});
    dk = view(dk_, {B, Sk, Hk, D});
    dv = view(dv_, {B, Sk, Hk, D});
    opt.backend = Backend::kCPU;
  }

  static TensorView view(std::vector<float>& x, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(x.data(), DType::kFloat32, shape);
  }
  std::function<void()> fwd() {
    return [this] { forward(q, k, v, out, lse, opt); };
  }
  std::function<void()> bwd() {
    return [this] { backward(q, k, v, out, lse, dout, dq, dk, dv, opt); };
  }

  std::vector<float> q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_;
  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  AttentionOptions opt;
};

TEST_F(Validation, TheValidProblemRuns) {
  EXPECT_NO_THROW(fwd()());
  EXPECT_NO_THROW(bwd()());
}

TEST_F(Validation, RankMismatch) {
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {B * Sk, Hk, D});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k must have rank 4", "got rank 3", "[14, 2, 16]"}));
}

TEST_F(Validation, VarlenRankWithoutCuSeqlens) {
  q = TensorView::contiguous(q_.data(), DType::kFloat32, {B * Sq, Hq, D});
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {B * Sk, Hk, D});
  v = TensorView::contiguous(v_.data(), DType::kFloat32, {B * Sk, Hk, D});
  out = TensorView::contiguous(out_.data(), DType::kFloat32, {B * Sq, Hq, D});
  lse = TensorView::contiguous(lse_.data(), DType::kFloat32, {Hq, B * Sq});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_q is required", "rank 3"}));
}

TEST_F(Validation, VarlenRankOnOneTensorOnly) {
  q = TensorView::contiguous(q_.data(), DType::kFloat32, {B * Sq, Hq, D});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k must have rank 3", "got rank 4", "[2, 7, 2, 16]"}));
}

TEST_F(Validation, HeadDimMismatch) {
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {B, Sk * 2, Hk, D / 2});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k has head dim 8", "16"}));
}

TEST_F(Validation, KeyValueLengthMismatch) {
  v = TensorView::contiguous(v_.data(), DType::kFloat32, {B, Sk - 1, Hk, D});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"v has sequence length 6", "7"}));
}

TEST_F(Validation, BatchMismatch) {
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {1, Sk, Hk, D});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k has batch 1", "2"}));
}

TEST_F(Validation, OutShapeMismatch) {
  out = TensorView::contiguous(out_.data(), DType::kFloat32, {B, Sq, Hq / 2, D});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"out has shape [2, 5, 4, 16]", "[2, 5, 8, 16]"}));
}

TEST_F(Validation, LseShapeMismatch) {
  lse = TensorView::contiguous(lse_.data(), DType::kFloat32, {B, Hq, Sq - 1});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"lse has sequence length 4", "5"}));
  lse = TensorView::contiguous(lse_.data(), DType::kFloat32, {B, Hq * Sq});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"lse must have rank 3", "got rank 2"}));
}

TEST_F(Validation, GradientShapeMismatch) {
  dk = TensorView::contiguous(dk_.data(), DType::kFloat32, {B, Sk, Hk, D / 2});
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dk has shape [2, 7, 2, 8]", "[2, 7, 2, 16]"}));
  dk = view(dk_, {B, Sk, Hk, D});
  dout = TensorView::contiguous(dout_.data(), DType::kFloat32, {B, Sq - 1, Hq, D});
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dout has shape [2, 4, 8, 16]", "[2, 5, 8, 16]"}));
}

TEST_F(Validation, DtypeMismatch) {
  k.dtype = DType::kFloat16;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k has dtype float16", "float32"}));
}

TEST_F(Validation, OutputDtypeMismatch) {
  out.dtype = DType::kBFloat16;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"out has dtype bfloat16", "float32"}));
  out.dtype = DType::kFloat32;
  lse.dtype = DType::kFloat16;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"lse has dtype float16", "float32"}));
}

TEST_F(Validation, UnsupportedDtype) {
  q.dtype = k.dtype = v.dtype = DType::kInt32;
  out.dtype = DType::kInt32;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"q has dtype int32"}));
}

TEST_F(Validation, Float64IsReferenceOnly) {
  std::vector<double> q64(q_.size(), 0.5), k64(k_.size(), 0.25), v64(v_.size(), 1.0),
      out64(out_.size()), lse64(lse_.size());
  q = TensorView::contiguous(q64.data(), DType::kFloat64, {B, Sq, Hq, D});
  k = TensorView::contiguous(k64.data(), DType::kFloat64, {B, Sk, Hk, D});
  v = TensorView::contiguous(v64.data(), DType::kFloat64, {B, Sk, Hk, D});
  out = TensorView::contiguous(out64.data(), DType::kFloat64, {B, Sq, Hq, D});
  lse = TensorView::contiguous(lse64.data(), DType::kFloat64, {B, Hq, Sq});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"q has dtype float64"}));
  opt.backend = Backend::kReference;
  EXPECT_NO_THROW(fwd()());
}

TEST_F(Validation, UnsupportedBackendSaysWhy) {
#ifdef FLASHTRAIN_WITH_CUDA
  if (cuda_available()) {
    // Head dim 40 is not instantiated on the GPU: the refusal must name it.
    constexpr int64_t kOddDim = 40;
    const std::size_t bytes = B * Sq * Hq * kOddDim * sizeof(uint16_t) * 4;
    void* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, 4 * bytes), cudaSuccess);
    char* base = static_cast<char*>(buf);
    auto dev = [&](int i, std::initializer_list<int64_t> shape) {
      return TensorView::contiguous(base + i * bytes, DType::kBFloat16, shape, Device::kCUDA);
    };
    float* dlse = nullptr;
    ASSERT_EQ(cudaMalloc(&dlse, B * Hq * Sq * sizeof(float)), cudaSuccess);
    q = dev(0, {B, Sq, Hq, kOddDim});
    k = dev(1, {B, Sk, Hk, kOddDim});
    v = dev(2, {B, Sk, Hk, kOddDim});
    out = dev(3, {B, Sq, Hq, kOddDim});
    lse = TensorView::contiguous(dlse, DType::kFloat32, {B, Hq, Sq}, Device::kCUDA);
    opt.backend = Backend::kCUDA;
    EXPECT_TRUE(ThrowsMentioning(fwd(), {"cuda", "head dim", "40"}));
    cudaFree(buf);
    cudaFree(dlse);
    return;
  }
#endif
  // No GPU here: asking for the CUDA backend must say why it cannot run.
  opt.backend = Backend::kCUDA;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cuda"}));
}

TEST_F(Validation, NonContiguousLastDim) {
  q = TensorView::strided(q_.data(), DType::kFloat32, {B, Sq, Hq, D / 2},
                          {Sq * Hq * D, Hq * D, D, 2});
  out = TensorView::contiguous(out_.data(), DType::kFloat32, {B, Sq, Hq, D / 2});
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {B, Sk * 2, Hk, D / 2});
  v = TensorView::contiguous(v_.data(), DType::kFloat32, {B, Sk * 2, Hk, D / 2});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"q must have a contiguous last dim", "stride 2"}));
}

TEST_F(Validation, HeadsNotDivisible) {
  k = TensorView::contiguous(k_.data(), DType::kFloat32, {B, Sk, 3, D / 2});
  v = TensorView::contiguous(v_.data(), DType::kFloat32, {B, Sk, 3, D / 2});
  q = TensorView::contiguous(q_.data(), DType::kFloat32, {B, Sq, Hq, D / 2});
  out = TensorView::contiguous(out_.data(), DType::kFloat32, {B, Sq, Hq, D / 2});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"k has 3 heads", "8"}));
}

// Varlen problem on the same buffers: 3 sequences, total_q = 10, total_k = 14.
class VarlenValidation : public Validation {
 protected:
  VarlenValidation() {
    q = TensorView::contiguous(q_.data(), DType::kFloat32, {B * Sq, Hq, D});
    k = TensorView::contiguous(k_.data(), DType::kFloat32, {B * Sk, Hk, D});
    v = TensorView::contiguous(v_.data(), DType::kFloat32, {B * Sk, Hk, D});
    out = TensorView::contiguous(out_.data(), DType::kFloat32, {B * Sq, Hq, D});
    lse = TensorView::contiguous(lse_.data(), DType::kFloat32, {Hq, B * Sq});
    set_cu({0, 4, 4, 10}, {0, 6, 9, 14});
  }
  void set_cu(std::vector<int32_t> cq, std::vector<int32_t> ck) {
    cu_q_ = std::move(cq);
    cu_k_ = std::move(ck);
    opt.cu_seqlens_q = TensorView::contiguous(cu_q_.data(), DType::kInt32, {static_cast<int64_t>(cu_q_.size())});
    opt.cu_seqlens_k = TensorView::contiguous(cu_k_.data(), DType::kInt32, {static_cast<int64_t>(cu_k_.size())});
  }
  std::vector<int32_t> cu_q_, cu_k_;
};

TEST_F(VarlenValidation, TheValidProblemRuns) { EXPECT_NO_THROW(fwd()()); }

TEST_F(VarlenValidation, CuSeqlensNotStartingAtZero) {
  set_cu({2, 4, 4, 10}, {0, 6, 9, 14});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_q[0] = 2"}));
}

TEST_F(VarlenValidation, CuSeqlensDecreasing) {
  set_cu({0, 4, 4, 10}, {0, 6, 5, 14});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_k decreases", "6", "5"}));
}

TEST_F(VarlenValidation, CuSeqlensPastTheEnd) {
  set_cu({0, 4, 4, 12}, {0, 6, 9, 14});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_q ends at 12", "10 rows of q"}));
  set_cu({0, 4, 4, 10}, {0, 6, 9, 15});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_k ends at 15", "14 rows of k"}));
}

TEST_F(VarlenValidation, CuSeqlensSizesDiffer) {
  set_cu({0, 4, 4, 10}, {0, 6, 14});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_k has 3 entries", "4"}));
}

TEST_F(VarlenValidation, CuSeqlensWrongDtype) {
  opt.cu_seqlens_q.dtype = DType::kFloat32;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"cu_seqlens_q has dtype float32", "int32"}));
}

TEST_F(VarlenValidation, LseShape) {
  lse = TensorView::contiguous(lse_.data(), DType::kFloat32, {Hq, B * Sq - 1});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"lse has rows 9", "10"}));
}

TEST_F(Validation, WindowBelowMinusOne) {
  opt.window_left = -2;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"window", "-2"}));
  opt.window_left = 3;
  opt.window_right = -5;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"window", "-5"}));
}

TEST_F(Validation, CausalWithRightWindow) {
  opt.causal = true;
  opt.window_right = 3;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"window_right = 3", "causal"}));
}

TEST_F(VarlenValidation, NegativeMaxSeqlen) {
  opt.max_seqlen_q = -1;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"max_seqlen_q = -1"}));
}

TEST_F(Validation, DropoutOutsideRange) {
  for (const double p : {1.0, -0.1, 1.5}) {
    opt.dropout_p = p;
    std::ostringstream value;
    value << p;
    EXPECT_TRUE(ThrowsMentioning(fwd(), {"dropout_p = " + value.str(), "[0, 1)"}));
  }
  opt.dropout_p = kNaN;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"dropout_p = nan"}));
}

TEST_F(Validation, BadSoftmaxScale) {
  const std::pair<double, std::string> cases[] = {{0.0, "0"}, {-1.5, "-1.5"}, {kNaN, "nan"}, {kInf, "inf"}};
  for (const auto& [scale, text] : cases) {
    opt.softmax_scale = scale;
    EXPECT_TRUE(ThrowsMentioning(fwd(), {"softmax_scale = " + text}));
  }
}

TEST_F(Validation, BadSoftcap) {
  const std::pair<double, std::string> cases[] = {{-2.0, "-2"}, {kNaN, "nan"}, {kInf, "inf"}};
  for (const auto& [cap, text] : cases) {
    opt.softcap = cap;
    EXPECT_TRUE(ThrowsMentioning(fwd(), {"softcap = " + text}));
  }
}

TEST_F(Validation, NullDataPointers) {
  q.data = nullptr;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"q has a null data pointer", "[2, 5, 8, 16]"}));
  q = view(q_, {B, Sq, Hq, D});
  dv.data = nullptr;
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dv has a null data pointer", "[2, 7, 2, 16]"}));
}

TEST_F(Validation, MissingOutput) {
  lse = TensorView{};
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"lse is required"}));
}

TEST_F(Validation, OutputAliasesInput) {
  out.data = q.data;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"out (output) overlaps q"}));
  out = view(out_, {B, Sq, Hq, D});
  dq.data = dout.data;
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dq (output) overlaps dout"}));
  dq = view(dq_, {B, Sq, Hq, D});
  dv.data = dk.data;
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dk (output) overlaps dv"}));
}

TEST_F(Validation, AlibiShape) {
  std::vector<float> slopes(3, 0.1f);
  opt.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {3});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"alibi_slopes has shape [3]", "[8]", "[2, 8]"}));
}

TEST_F(Validation, AlibiDtype) {
  std::vector<double> slopes(Hq, 0.1);
  opt.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat64, {Hq});
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"alibi_slopes has dtype float64", "float32"}));
}

TEST_F(Validation, NonFiniteInputCheck) {
  q_[3 * Hq * D + 2 * D + 5] = std::numeric_limits<float>::quiet_NaN();  // q[0, 3, 2, 5]
  opt.nonfinite_inputs = NonFiniteInputs::kCheck;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"q[0, 3, 2, 5]", "nan"}));
  q_[3 * Hq * D + 2 * D + 5] = 0.5f;
  dout_[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(ThrowsMentioning(bwd(), {"dout[0, 0, 0, 1]", "inf"}));
}

TEST_F(Validation, EveryFailedRuleIsReportedAtOnce) {
  opt.dropout_p = 2.0;
  opt.softcap = -1.0;
  EXPECT_TRUE(ThrowsMentioning(fwd(), {"dropout_p = 2", "softcap = -1"}));
}

}  // namespace
}  // namespace flashtrain
