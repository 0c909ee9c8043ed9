// wgmma_role_check: does a Hopper wgmma give the same fp32 dot products whichever operand is A?
//
// Issue 5's fp16 logits~1e3 case: flashtrain's dQ/dK/dV errors are about 2x FlashAttention-2's, the
// excess follows the forward kernel (bench/results/2026-12-03_run10/doctor_logits_by_pass.txt),
// and a CPU emulation (bench/results/2026-12-03_run10/logits_dv_emulation.py) reproduces it when
// the backward's S differs from the forward's by a few ulps, not when both carry the same error.
// The sm90 forward computes S = Q K^T (Q as A, M = queries); the sm90 backward computes
// S^T = K Q^T (K as A, M = keys). This tool computes both for one 64 x 64 x D tile of fp16 or bf16
// inputs scaled like that case and reports how many elements differ bitwise, by how many ulps,
// and how far each is from the exact (float64) dot product.
//
// Build and run on an H200 from the repository root (CUTLASS headers in .cutlass/include):
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//        -I.cutlass/include bench/wgmma_role_check.cu -o build-gpu/wgmma_role_check
//   build-gpu/wgmma_role_check [--scale 30] [--seed 0]
// Exit status: 0 when both roles agree bit for bit, 1 when they differ, 2 on a CUDA error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "cuda/sm90/device_code_sm90.h"
#include "cuda/sm90/wgmma_utils_sm90.h"

namespace role_check {

using namespace cute;

constexpr int kTile = 64;  // rows of each operand: queries and keys
constexpr int kDim = 128;  // head dim (the contraction)

template <class Element>
struct RoleCheck {
  using SmemLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kTile>, Int<kDim>>{}));
  using Mma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kTile>, Int<kTile>, Int<kDim>>>()));
  struct Smem {
    array_aligned<Element, cosize_v<SmemLayout>, 1024> a;
    array_aligned<Element, cosize_v<SmemLayout>, 1024> b;
  };
};

// out_qk[i][j] = q_i . k_j with Q as A; out_kq[j][i] = k_j . q_i with K as A. One warpgroup.
template <class Element>
__global__ void __launch_bounds__(128, 1) role_kernel(const Element* q, const Element* k, float* out_qk, float* out_kq) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using Check = RoleCheck<Element>;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Check::Smem*>(smem_raw);
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), typename Check::SmemLayout{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), typename Check::SmemLayout{});
  typename Check::Mma mma;
  auto thr = mma.get_thread_slice(threadIdx.x);
  auto run = [&](const Element* a, const Element* b, float* out) {
    for (int i = threadIdx.x; i < kTile * kDim; i += blockDim.x) {
      sA(i / kDim, i % kDim) = a[i];
      sB(i / kDim, i % kDim) = b[i];
    }
    cutlass::arch::fence_view_async_shared();
    __syncthreads();
    Tensor tA = thr.partition_fragment_A(sA);
    Tensor tB = thr.partition_fragment_B(sB);
    Tensor acc = partition_fragment_C(mma, Shape<Int<kTile>, Int<kTile>>{});
    flashtrain::cuda::sm90::wgmma_gemm<true, 0>(mma, tA, tB, acc);
    Tensor gOut = make_tensor(make_gmem_ptr(out), make_layout(Shape<Int<kTile>, Int<kTile>>{}, LayoutRight{}));
    Tensor tOut = thr.partition_C(gOut);
    for (int i = 0; i < size(acc); ++i) tOut(i) = acc(i);
    __syncthreads();  // the next run overwrites the operands
  };
  run(q, k, out_qk);
  run(k, q, out_kq);
#endif
}

inline int32_t ordered(float x) {  // float bits on a line where adjacent floats differ by 1
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i < 0 ? INT32_MIN - i : i;
}

template <class Element>
int check(float scale, unsigned seed, const char* name) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<Element> q(kTile * kDim), k(kTile * kDim);
  for (auto& x : q) x = Element(normal(gen));
  for (auto& x : k) x = Element(normal(gen));
  Element *dq = nullptr, *dk = nullptr;
  float *dqk = nullptr, *dkq = nullptr;
  const size_t bytes = sizeof(Element) * q.size(), out_bytes = sizeof(float) * kTile * kTile;
  if (cudaMalloc(&dq, bytes) != cudaSuccess || cudaMalloc(&dk, bytes) != cudaSuccess ||
      cudaMalloc(&dqk, out_bytes) != cudaSuccess || cudaMalloc(&dkq, out_bytes) != cudaSuccess) {
    std::fprintf(stderr, "wgmma_role_check: cudaMalloc failed\n");
    return 2;
  }
  cudaMemcpy(dq, q.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), bytes, cudaMemcpyHostToDevice);
  const int smem = static_cast<int>(sizeof(typename RoleCheck<Element>::Smem));
  cudaFuncSetAttribute(role_kernel<Element>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  role_kernel<Element><<<1, 128, smem>>>(dq, dk, dqk, dkq);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "wgmma_role_check: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  std::vector<float> qk(kTile * kTile), kq(kTile * kTile);
  cudaMemcpy(qk.data(), dqk, out_bytes, cudaMemcpyDeviceToHost);
  cudaMemcpy(kq.data(), dkq, out_bytes, cudaMemcpyDeviceToHost);
  cudaFree(dq); cudaFree(dk); cudaFree(dqk); cudaFree(dkq);

  int differ = 0;
  int64_t max_ulps = 0;
  double err_qk = 0, err_kq = 0;  // max |S - exact| over max |exact|
  double top = 0;
  for (int i = 0; i < kTile; ++i) {
    for (int j = 0; j < kTile; ++j) {
      double exact = 0;
      for (int d = 0; d < kDim; ++d) exact += double(float(q[i * kDim + d])) * double(float(k[j * kDim + d]));
      const float a = qk[i * kTile + j], b = kq[j * kTile + i];
      if (std::memcmp(&a, &b, sizeof a) != 0) ++differ;
      max_ulps = std::max<int64_t>(max_ulps, std::llabs(int64_t(ordered(a)) - ordered(b)));
      err_qk = std::max(err_qk, std::fabs(a - exact));
      err_kq = std::max(err_kq, std::fabs(b - exact));
      top = std::max(top, std::fabs(exact));
    }
  }
  std::printf("%s, scale %g: %d of %d dot products differ between Q-as-A and K-as-A (max %lld ulps); "
              "max |error| / max |exact|: Q as A %.3e, K as A %.3e\n",
              name, scale, differ, kTile * kTile, static_cast<long long>(max_ulps), err_qk / top, err_kq / top);
  return differ == 0 ? 0 : 1;
}

}  // namespace role_check

int main(int argc, char** argv) {
  float scale = 30.0f;
  unsigned seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: wgmma_role_check [--scale S] [--seed N]\n"
                  "  Computes one 64 x 64 x 128 tile of q.k dot products (inputs normal(0, S), fp16 and bf16)\n"
                  "  with a wgmma taking Q as A and with one taking K as A, and reports whether they agree\n"
                  "  bit for bit. Exit status 0: they agree; 1: they differ; 2: CUDA error.\n");
      return 0;
    }
    if (arg == "--scale" && i + 1 < argc) {
      scale = std::stof(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = static_cast<unsigned>(std::stoul(argv[++i]));
    } else {
      std::fprintf(stderr, "wgmma_role_check: unknown argument %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  const int a = role_check::check<cutlass::half_t>(scale, seed, "fp16");
  const int b = role_check::check<cutlass::bfloat16_t>(scale, seed, "bf16");
  return std::max(a, b);
}
