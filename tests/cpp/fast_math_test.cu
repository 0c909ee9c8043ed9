// poly_exp2 (src/cuda/common/fast_math.h), the FMA-pipe exp2 the sm90 forward takes for a quarter
// of its scores at head dim 64, against exp2 in float64 on a dense sweep of the softmax's inputs
// (x <= 0), and at the inputs it clamps: below -126, -inf included, a value in (0, 2^-126].
// MUFU's exp2 (fast_exp2) runs on the same points as a yardstick. Needs a compute capability 9.0
// device (the tests' only device code target); skips otherwise.
#include <cmath>
#include <limits>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda/common/fast_math.h"

namespace {

__global__ void exp2_both(const float* x, float* poly, float* mufu, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    poly[i] = flashtrain::cuda::poly_exp2(x[i]);
    mufu[i] = flashtrain::cuda::fast_exp2(x[i]);
  }
}

bool sm90_device() {
  int count = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

TEST(FastMath, PolyExp2MatchesExp2) {
  if (!sm90_device()) GTEST_SKIP() << "no compute capability 9.0 device";
  std::vector<float> x;
  constexpr int kSteps = 1 << 21;
  for (int i = 0; i <= kSteps; ++i) x.push_back(-130.0f * static_cast<float>(i) / kSteps);
  for (float v : {-0.0f, -1e-30f, -0.5f, -0.49999997f, -0.50000006f, -125.5f, -126.0f, -126.5f, -1e30f,
                  -std::numeric_limits<float>::infinity()})
    x.push_back(v);
  const int n = static_cast<int>(x.size());
  float *d_x = nullptr, *d_poly = nullptr, *d_mufu = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_poly, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_mufu, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  exp2_both<<<(n + 255) / 256, 256>>>(d_x, d_poly, d_mufu, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> poly(n), mufu(n);
  ASSERT_EQ(cudaMemcpy(poly.data(), d_poly, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(mufu.data(), d_mufu, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_x);
  cudaFree(d_poly);
  cudaFree(d_mufu);

  double worst_poly = 0.0, worst_mufu = 0.0, sum_poly = 0.0;
  int in_range = 0, bad_clamped = 0;
  const float tiny = std::ldexp(1.0f, -126);
  for (int i = 0; i < n; ++i) {
    if (x[i] >= -125.0f) {
      const double want = std::exp2(static_cast<double>(x[i]));
      const double err = poly[i] / want - 1.0;
      worst_poly = std::max(worst_poly, std::abs(err));
      worst_mufu = std::max(worst_mufu, std::abs(mufu[i] / want - 1.0));
      sum_poly += err;
      ++in_range;
    } else if (x[i] < -126.0f && !(poly[i] > 0.0f && poly[i] <= tiny) && ++bad_clamped <= 5) {
      ADD_FAILURE() << "poly_exp2(" << x[i] << ") = " << poly[i] << ", expected a value in (0, 2^-126]";
    }
  }
  EXPECT_EQ(bad_clamped, 0);
  // The fit's bound is 2.9e-6 (float64 fit, fp32 Horner); MUFU's ex2.approx is ~2^-22.
  EXPECT_LE(worst_poly, 3.0e-6) << "MUFU's worst on the same points: " << worst_mufu;
  // No drift of one sign, which a row sum of many terms would carry into lse.
  EXPECT_LE(std::abs(sum_poly / in_range), 1.0e-6);
  EXPECT_EQ(poly[n - 10], 1.0f) << "2^-0";
}

}  // namespace
