// The parts of the public API around the attention math: TensorView helpers, backend choice,
// workspace queries, the default softmax scale, and NumericsReport telemetry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/mask.h"
#include "flashtrain/attention.h"

namespace flashtrain {
namespace {

TEST(TensorView, ShapeStridesAndByteRange) {
  std::vector<float> buf(2 * 3 * 4 * 5);
  const TensorView t = TensorView::contiguous(buf.data(), DType::kFloat32, {2, 3, 4, 5});
  EXPECT_EQ(t.numel(), 120);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.stride[0], 60);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4, 5]");
  EXPECT_EQ(t.byte_end() - t.byte_begin(), static_cast<std::ptrdiff_t>(120 * sizeof(float)));
  // A slice: every other head of a [2, 3, 8, 5] buffer.
  const TensorView s = TensorView::strided(buf.data(), DType::kFloat32, {2, 3, 4, 5}, {60, 20, 10, 1});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.byte_end() - s.byte_begin(),
            static_cast<std::ptrdiff_t>((60 + 40 + 30 + 4 + 1) * sizeof(float)));  // last element + 1
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
}

// Small fp32 problem on the host with its own buffers.
struct Host {
  static constexpr int64_t B = 2, Sq = 50, Sk = 20, Hq = 3, Hk = 1, D = 16;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  Host() {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal;
    auto random = [&](int64_t n) {
      std::vector<float> x(n);
      for (float& e : x) e = normal(gen);
      return x;
    };
    q = random(B * Sq * Hq * D);
    k = random(B * Sk * Hk * D);
    v = random(B * Sk * Hk * D);
    dout = random(B * Sq * Hq * D);
    out.assign(q.size(), 0.0f);
    dq.assign(q.size(), 0.0f);
    dk.assign(k.size(), 0.0f);
    dv.assign(v.size(), 0.0f);
    lse.assign(B * Hq * Sq, 0.0f);
  }
  TensorView tq() { return TensorView::contiguous(q.data(), DType::kFloat32, {B, Sq, Hq, D}); }
  TensorView tk() { return TensorView::contiguous(k.data(), DType::kFloat32, {B, Sk, Hk, D}); }
  TensorView tv() { return TensorView::contiguous(v.data(), DType::kFloat32, {B, Sk, Hk, D}); }
  void fwd(const AttentionOptions& o) {
    forward(tq(), tk(), tv(), TensorView::contiguous(out.data(), DType::kFloat32, {B, Sq, Hq, D}),
            TensorView::contiguous(lse.data(), DType::kFloat32, {B, Hq, Sq}), o);
  }
  void bwd(const AttentionOptions& o) {
    backward(tq(), tk(), tv(), TensorView::contiguous(out.data(), DType::kFloat32, {B, Sq, Hq, D}),
             TensorView::contiguous(lse.data(), DType::kFloat32, {B, Hq, Sq}),
             TensorView::contiguous(dout.data(), DType::kFloat32, {B, Sq, Hq, D}),
             TensorView::contiguous(dq.data(), DType::kFloat32, {B, Sq, Hq, D}),
             TensorView::contiguous(dk.data(), DType::kFloat32, {B, Sk, Hk, D}),
             TensorView::contiguous(dv.data(), DType::kFloat32, {B, Sk, Hk, D}), o);
  }
};

TEST(Api, AutoPicksTheCpuForHostTensors) {
  Host h;
  const BackendChoice c = choose_backend(h.tq(), h.tk(), h.tv());
  EXPECT_EQ(c.backend, Backend::kCPU);
  EXPECT_STREQ(backend_name(c.backend), "cpu");
  EXPECT_EQ(backward_workspace_size(h.tq(), h.tk(), h.tv()), 0u);
}

TEST(Api, DefaultScaleIsOneOverSqrtHeadDim) {
  // D = 16: 1/sqrt(D) = 0.25 exactly, so the explicit run must be bitwise identical.
  Host a, b;
  AttentionOptions o;
  o.causal = true;
  a.fwd(o);
  a.bwd(o);
  o.softmax_scale = 0.25;
  b.fwd(o);
  b.bwd(o);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  // And a different scale changes the result.
  o.softmax_scale = 0.5;
  b.fwd(o);
  EXPECT_NE(a.out, b.out);
}

TEST(Api, NumericsReport) {
  Host h;
  NumericsReport report;
  AttentionOptions o;
  o.causal = true;  // bottom-right with Sq = 50 > Sk = 20: rows 0..29 of each head see no key
  o.report = &report;
  h.fwd(o);
  EXPECT_EQ(report.forward_calls, 1);
  EXPECT_EQ(report.backward_calls, 0);
  EXPECT_EQ(report.fully_masked_rows, Host::B * Host::Hq * (Host::Sq - Host::Sk));

  // lse range: the finite lse values just written.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (float x : h.lse)
    if (std::isfinite(x)) lo = std::min(lo, double(x)), hi = std::max(hi, double(x));
  EXPECT_DOUBLE_EQ(report.lse_min, lo);
  EXPECT_DOUBLE_EQ(report.lse_max, hi);

  // max |scale * q.k| over visible entries, in double.
  const double scale = 1.0 / std::sqrt(double(Host::D));
  const MaskSpec mask{Host::Sk - Host::Sq, -1, 0, Host::Sk};
  double max_logit = 0.0;
  for (int64_t b = 0; b < Host::B; ++b)
    for (int64_t hh = 0; hh < Host::Hq; ++hh)
      for (int64_t i = 0; i < Host::Sq; ++i)
        for (int64_t j = 0; j < Host::Sk; ++j) {
          if (!mask.visible(i, j)) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < Host::D; ++d)
            dot += double(h.q[((b * Host::Sq + i) * Host::Hq + hh) * Host::D + d]) *
                   h.k[(b * Host::Sk + j) * Host::D + d];
          max_logit = std::max(max_logit, std::fabs(scale * dot));
        }
  EXPECT_NEAR(report.max_abs_scaled_logit, max_logit, 1e-5 * max_logit);

  EXPECT_EQ(report.max_abs_ds, 0.0);
  h.bwd(o);
  EXPECT_EQ(report.backward_calls, 1);
  EXPECT_GT(report.max_abs_ds, 0.0);
  EXPECT_TRUE(std::isfinite(report.max_abs_ds));
  EXPECT_EQ(report.safe_mode_reruns, 0);

  // Merged across calls until reset.
  h.fwd(o);
  EXPECT_EQ(report.forward_calls, 2);
  EXPECT_EQ(report.fully_masked_rows, 2 * Host::B * Host::Hq * (Host::Sq - Host::Sk));
  report.reset();
  EXPECT_EQ(report.forward_calls, 0);
  EXPECT_EQ(report.fully_masked_rows, 0);
}

TEST(Api, NonFiniteInputPropagatesOnlyWhereItIsUsed) {
  // NonFiniteInputs::kPropagate: NaN in q[0, 33, 1, :] reaches out row (0, 33, 1) and nothing
  // else; a backend that lets it leak into its tile neighbours fails here.
  Host h;
  constexpr int64_t kRow = 33, kHead = 1;
  h.q[(kRow * Host::Hq + kHead) * Host::D + 5] = std::numeric_limits<float>::quiet_NaN();
  h.fwd(AttentionOptions{});
  for (int64_t b = 0; b < Host::B; ++b)
    for (int64_t i = 0; i < Host::Sq; ++i)
      for (int64_t hh = 0; hh < Host::Hq; ++hh) {
        const bool poisoned = b == 0 && i == kRow && hh == kHead;
        const float lse = h.lse[(b * Host::Hq + hh) * Host::Sq + i];
        EXPECT_EQ(std::isnan(lse), poisoned) << "lse at " << b << ", " << hh << ", " << i;
        for (int64_t d = 0; d < Host::D; ++d)
          ASSERT_EQ(std::isnan(h.out[((b * Host::Sq + i) * Host::Hq + hh) * Host::D + d]), poisoned)
              << "out at " << b << ", " << i << ", " << hh << ", " << d;
      }
}

}  // namespace
}  // namespace flashtrain
