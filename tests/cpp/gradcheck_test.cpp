// Gradients against central finite differences of the float64 forward, on small shapes:
//  - the float64 reference backward (exact math: agreement to ~1e-7 relative), and
//  - the CPU backend's fp32 backward (fp32 rounding: a looser bound).
// The loss is L = sum(out * dout) with a fixed random dout, so dL/dx is what backward returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "flashtrain/attention.h"

namespace flashtrain {
namespace {

// Small GQA problem with Sq != Sk and Dv != Dqk.
constexpr int64_t kB = 1, kSq = 5, kSk = 7, kHq = 2, kHk = 1, kD = 4, kDv = 3;
// Central difference step: truncation error ~h^2 |f'''| ~ 1e-12 and cancellation ~1e-16 / h
// ~ 1e-10, both far below the tolerances below.
constexpr double kStep = 1e-6;
constexpr double kRefTolerance = 1e-7;   // relative to max |gradient|
constexpr double kFp32Tolerance = 2e-4;  // fp32 rounding of S, P, dP, dS over short rows

struct Config {
  std::string name;
  AttentionOptions options;
  bool alibi = false;
};

std::vector<Config> configs() {
  std::vector<Config> c(5);
  c[0].name = "plain";
  c[1].name = "causal bottom-right + softcap";
  c[1].options.causal = true;
  c[1].options.softcap = 2.0;
  c[2].name = "window (2, 1) top-left + ALiBi + scale 0.7";
  c[2].options.window_left = 2;
  c[2].options.window_right = 1;
  c[2].options.align = CausalAlign::kTopLeft;
  c[2].options.softmax_scale = 0.7;
  c[2].alibi = true;
  c[3].name = "dropout 0.17";
  c[3].options.dropout_p = 0.17;
  c[3].options.seed = 5;
  c[4].name = "causal top-left (Sq < Sk)";
  c[4].options.causal = true;
  c[4].options.align = CausalAlign::kTopLeft;
  return c;
}

struct Problem64 {
  std::vector<double> q, k, v, dout;
  std::vector<float> alibi = {0.3f, 0.05f};
};

Problem64 random_problem(uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  Problem64 p;
  auto fill = [&](std::vector<double>& x, int64_t n) {
    x.resize(n);
    // Rounded to fp32 so the CPU backend's fp32 inputs are exactly these values.
    for (double& e : x) e = static_cast<float>(normal(gen));
  };
  fill(p.q, kB * kSq * kHq * kD);
  fill(p.k, kB * kSk * kHk * kD);
  fill(p.v, kB * kSk * kHk * kDv);
  fill(p.dout, kB * kSq * kHq * kDv);
  return p;
}

AttentionOptions with_alibi(const Config& c, Problem64& p, Backend backend) {
  AttentionOptions o = c.options;
  o.backend = backend;
  if (c.alibi) o.alibi_slopes = TensorView::contiguous(p.alibi.data(), DType::kFloat32, {kHq});
  return o;
}

// L = sum(out * dout) from the float64 reference forward.
double loss(Problem64& p, const AttentionOptions& o) {
  std::vector<double> out(kB * kSq * kHq * kDv), lse(kB * kHq * kSq);
  forward(TensorView::contiguous(p.q.data(), DType::kFloat64, {kB, kSq, kHq, kD}),
          TensorView::contiguous(p.k.data(), DType::kFloat64, {kB, kSk, kHk, kD}),
          TensorView::contiguous(p.v.data(), DType::kFloat64, {kB, kSk, kHk, kDv}),
          TensorView::contiguous(out.data(), DType::kFloat64, {kB, kSq, kHq, kDv}),
          TensorView::contiguous(lse.data(), DType::kFloat64, {kB, kHq, kSq}), o);
  double l = 0.0;
  for (std::size_t e = 0; e < out.size(); ++e) l += out[e] * p.dout[e];
  return l;
}

// Central differences of L over every element of x.
std::vector<double> numeric_grad(Problem64& p, std::vector<double>& x, const AttentionOptions& o) {
  std::vector<double> g(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) {
    const double saved = x[e];
    x[e] = saved + kStep;
    const double up = loss(p, o);
    x[e] = saved - kStep;
    const double down = loss(p, o);
    x[e] = saved;
    g[e] = (up - down) / (2.0 * kStep);
  }
  return g;
}

struct Grads {
  std::vector<double> dq, dk, dv;
};

// Backward on `backend` in `dtype` (float64 on the reference, float32 on the CPU).
Grads analytic_grads(Problem64& p, const AttentionOptions& o, DType dtype) {
  auto convert = [&](const std::vector<double>& x) {
    std::vector<unsigned char> bytes(x.size() * dtype_size(dtype));
    for (std::size_t e = 0; e < x.size(); ++e) {
      if (dtype == DType::kFloat64) reinterpret_cast<double*>(bytes.data())[e] = x[e];
      else reinterpret_cast<float*>(bytes.data())[e] = static_cast<float>(x[e]);
    }
    return bytes;
  };
  auto to_double = [&](const std::vector<unsigned char>& bytes) {
    std::vector<double> x(bytes.size() / dtype_size(dtype));
    for (std::size_t e = 0; e < x.size(); ++e)
      x[e] = dtype == DType::kFloat64 ? reinterpret_cast<const double*>(bytes.data())[e]
                                      : reinterpret_cast<const float*>(bytes.data())[e];
    return x;
  };
  std::vector<unsigned char> q = convert(p.q), k = convert(p.k), v = convert(p.v),
                             dout = convert(p.dout);
  std::vector<unsigned char> out(kB * kSq * kHq * kDv * dtype_size(dtype)), dq(q.size()),
      dk(k.size()), dv(v.size());
  std::vector<unsigned char> lse(kB * kHq * kSq * dtype_size(dtype == DType::kFloat64 ? dtype : DType::kFloat32));
  const TensorView tq = TensorView::contiguous(q.data(), dtype, {kB, kSq, kHq, kD});
  const TensorView tk = TensorView::contiguous(k.data(), dtype, {kB, kSk, kHk, kD});
  const TensorView tv = TensorView::contiguous(v.data(), dtype, {kB, kSk, kHk, kDv});
  const TensorView tout = TensorView::contiguous(out.data(), dtype, {kB, kSq, kHq, kDv});
  const TensorView tlse = TensorView::contiguous(
      lse.data(), dtype == DType::kFloat64 ? dtype : DType::kFloat32, {kB, kHq, kSq});
  forward(tq, tk, tv, tout, tlse, o);
  backward(tq, tk, tv, tout, tlse, TensorView::contiguous(dout.data(), dtype, {kB, kSq, kHq, kDv}),
           TensorView::contiguous(dq.data(), dtype, {kB, kSq, kHq, kD}),
           TensorView::contiguous(dk.data(), dtype, {kB, kSk, kHk, kD}),
           TensorView::contiguous(dv.data(), dtype, {kB, kSk, kHk, kDv}), o);
  return Grads{to_double(dq), to_double(dk), to_double(dv)};
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  double tolerance, const std::string& what) {
  double scale = 0.0, err = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t e = 0; e < want.size(); ++e) err = std::max(err, std::fabs(got[e] - want[e]));
  ASSERT_GT(scale, 0.0) << what << ": the gradient is identically zero, the check would be empty";
  EXPECT_LE(err, tolerance * scale) << what << ": max abs error " << err << ", max |grad| " << scale;
}

class GradCheck : public ::testing::TestWithParam<Backend> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  const Backend backend = GetParam();
  const DType dtype = backend == Backend::kReference ? DType::kFloat64 : DType::kFloat32;
  const double tolerance = backend == Backend::kReference ? kRefTolerance : kFp32Tolerance;
  uint32_t seed = 11;
  for (const Config& c : configs()) {
    Problem64 p = random_problem(seed++);
    const AttentionOptions ref = with_alibi(c, p, Backend::kReference);
    const Grads g = analytic_grads(p, with_alibi(c, p, backend), dtype);
    expect_close(g.dq, numeric_grad(p, p.q, ref), tolerance, c.name + ": dq");
    expect_close(g.dk, numeric_grad(p, p.k, ref), tolerance, c.name + ": dk");
    expect_close(g.dv, numeric_grad(p, p.v, ref), tolerance, c.name + ": dv");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GradCheck, ::testing::Values(Backend::kReference, Backend::kCPU),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(backend_name(info.param));
                         });

}  // namespace
}  // namespace flashtrain
