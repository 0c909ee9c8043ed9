// wgmma_role_check: does a Hopper wgmma give the same fp32 dot products whichever operand is A?
//
// Issue 5's fp16 logits~1e3 case: flashtrain's dQ/dK/dV errors are about 2x FlashAttention-2's, the
// excess follows the forward kernel (bench/results/2026-12-03_run10/doctor_logits_by_pass.txt),
// and a CPU emulation (bench/results/2026-12-03_run10/logits_dv_emulation.py) reproduces it when
// the backward's S differs from the forward's by a few ulps, not when both carry the same error.
// The sm90 forward computes S = Q K^T (Q as A, M = queries, m64n128k16 at D <= 128); the sm90
// backward computes S^T = K Q^T (K as A, M = keys, m64n64k16 at D 128). This tool computes one
// 64 x 64 x D tile of fp16 or bf16 inputs scaled like that case with wgmma n64 (each operand as A),
// with the forward's n128 instruction over 128 keys, and with mma.sync (the sm80 kernels'
// instruction, each order), and reports how many elements differ bitwise, by how many ulps, and
// how far each is from the exact (float64) dot product.
// Result on the H200 (bench/results/2026-12-03_run11): every variant agrees bit for bit, so the
// forward/backward lse disagreement of issue 5 does not come from the instructions themselves.
//
// Build and run on an H200 from the repository root (CUTLASS headers in .cutlass/include):
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//        -I.cutlass/include bench/wgmma_role_check.cu -o build-gpu/wgmma_role_check
//   build-gpu/wgmma_role_check [--scale 30] [--seed 0]
// Exit status: 0 when the forward's n128 S agrees bit for bit with the backward's n64 S^T, 1 when
// they differ, 2 on a CUDA error.
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

// out[i][j] = a_i . b_j for 64 rows of A and kKeys rows of B, one wgmma m64nKk16 chain over
// D (kKeys = 64: the backward's S^T shape at D 128, either operand as A; kKeys = 128: the forward's
// S = Q K^T). One warpgroup.
constexpr int kWide = 128;
template <class Element, int kKeys>
struct WgmmaCheck {
  using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kTile>, Int<kDim>>{}));
  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kKeys>, Int<kDim>>{}));
  using Mma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kTile>, Int<kKeys>, Int<kDim>>>()));
  struct Smem {
    array_aligned<Element, cosize_v<SmemLayoutA>, 1024> a;
    array_aligned<Element, cosize_v<SmemLayoutB>, 1024> b;
  };
};
template <class Element, int kKeys>
__global__ void __launch_bounds__(128, 1) wgmma_kernel(const Element* a, const Element* b, float* out) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using Check = WgmmaCheck<Element, kKeys>;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Check::Smem*>(smem_raw);
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), typename Check::SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), typename Check::SmemLayoutB{});
  for (int i = threadIdx.x; i < kTile * kDim; i += blockDim.x) sA(i / kDim, i % kDim) = a[i];
  for (int i = threadIdx.x; i < kKeys * kDim; i += blockDim.x) sB(i / kDim, i % kDim) = b[i];
  cutlass::arch::fence_view_async_shared();
  __syncthreads();
  typename Check::Mma mma;
  auto thr = mma.get_thread_slice(threadIdx.x);
  Tensor tA = thr.partition_fragment_A(sA);
  Tensor tB = thr.partition_fragment_B(sB);
  Tensor acc = partition_fragment_C(mma, Shape<Int<kTile>, Int<kKeys>>{});
  flashtrain::cuda::sm90::wgmma_gemm<true, 0>(mma, tA, tB, acc);
  Tensor gOut = make_tensor(make_gmem_ptr(out), make_layout(Shape<Int<kTile>, Int<kKeys>>{}, LayoutRight{}));
  Tensor tOut = thr.partition_C(gOut);
  for (int i = 0; i < size(acc); ++i) tOut(i) = acc(i);
#endif
}
// Launches wgmma_kernel<Element, kKeys> on one warpgroup with its shared memory.
template <class Element, int kKeys>
void launch_wgmma(const Element* a, const Element* b, float* out) {
  const int smem = static_cast<int>(sizeof(typename WgmmaCheck<Element, kKeys>::Smem));
  cudaFuncSetAttribute(wgmma_kernel<Element, kKeys>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  wgmma_kernel<Element, kKeys><<<1, 128, smem>>>(a, b, out);
}

// The same dot products with the sm80 instruction (mma.sync m16n8k16, fp32 accumulators), which
// flashtrain's sm80 kernels use: out[i][j] = a_i . b_j, one warp over the 64 x 64 tile.
template <class Element>
__global__ void mma_sync_kernel(const Element* a, const Element* b, float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
  auto pack = [](Element lo, Element hi) {
    uint16_t l, h;
    std::memcpy(&l, &lo, 2);
    std::memcpy(&h, &hi, 2);
    return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
  };
  for (int ti = 0; ti < kTile / 16; ++ti) {
    for (int tj = 0; tj < kTile / 8; ++tj) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      for (int kb = 0; kb < kDim / 16; ++kb) {
        const Element* a0 = a + (16 * ti + group) * kDim + 16 * kb + 2 * tig;  // row group, cols 2 tig + {0, 1}
        const Element* a8 = a0 + 8 * kDim;                                       // row group + 8
        const Element* b0 = b + (8 * tj + group) * kDim + 16 * kb + 2 * tig;    // B(k, n) = b[n][k]
        const uint32_t ra[4] = {pack(a0[0], a0[1]), pack(a8[0], a8[1]), pack(a0[8], a0[9]), pack(a8[8], a8[9])};
        const uint32_t rb[2] = {pack(b0[0], b0[1]), pack(b0[8], b0[9])};
        if constexpr (cute::is_same_v<Element, cutlass::half_t>) {
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                       : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                       : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
        } else {
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                       : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                       : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
        }
      }
      const int row = 16 * ti + group, col = 8 * tj + 2 * tig;
      out[row * kTile + col] = c[0];
      out[row * kTile + col + 1] = c[1];
      out[(row + 8) * kTile + col] = c[2];
      out[(row + 8) * kTile + col + 1] = c[3];
    }
  }
#endif
}

inline int32_t ordered(float x) {  // float bits on a line where adjacent floats differ by 1
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i < 0 ? INT32_MIN - i : i;
}

// Bitwise differences between two ways of computing the tile: S as [i][j] = q_i . k_j each.
inline void compare(const char* what, const std::vector<float>& x, const std::vector<float>& y) {
  int differ = 0;
  int64_t max_ulps = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) ++differ;
    max_ulps = std::max<int64_t>(max_ulps, std::llabs(int64_t(ordered(x[i])) - ordered(y[i])));
  }
  std::printf("  %-44s %5d of %d differ, max %lld ulps\n", what, differ, static_cast<int>(x.size()),
              static_cast<long long>(max_ulps));
}

template <class Element>
int check(float scale, unsigned seed, const char* name) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<Element> q(kTile * kDim), k(kWide * kDim);  // the 64 x 64 runs use k's first 64 rows
  for (auto& x : q) x = Element(normal(gen));
  for (auto& x : k) x = Element(normal(gen));
  Element *dq = nullptr, *dk = nullptr;
  // Four tiles (wgmma Q as A, wgmma K as A, mma.sync Q as A, mma.sync K as A), then the wide one.
  float* dout = nullptr;
  const size_t bytes = sizeof(Element) * q.size(), tile = kTile * kTile, wide = kTile * kWide;
  if (cudaMalloc(&dq, bytes) != cudaSuccess || cudaMalloc(&dk, sizeof(Element) * k.size()) != cudaSuccess ||
      cudaMalloc(&dout, (4 * tile + wide) * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "wgmma_role_check: cudaMalloc failed\n");
    return 2;
  }
  cudaMemcpy(dq, q.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), sizeof(Element) * k.size(), cudaMemcpyHostToDevice);
  launch_wgmma<Element, kTile>(dq, dk, dout);
  launch_wgmma<Element, kTile>(dk, dq, dout + tile);
  mma_sync_kernel<Element><<<1, 32>>>(dq, dk, dout + 2 * tile);
  mma_sync_kernel<Element><<<1, 32>>>(dk, dq, dout + 3 * tile);
  launch_wgmma<Element, kWide>(dq, dk, dout + 4 * tile);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "wgmma_role_check: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  std::vector<float> all(4 * tile + wide);
  cudaMemcpy(all.data(), dout, all.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(dq); cudaFree(dk); cudaFree(dout);

  // Each as S[i][j] = q_i . k_j (the K-as-A results transposed), and the exact dot products.
  std::vector<float> s[5];
  std::vector<double> exact(tile);
  for (int v = 0; v < 5; ++v) s[v].resize(tile);
  double top = 0;
  for (int i = 0; i < kTile; ++i) {
    for (int j = 0; j < kTile; ++j) {
      double e = 0;
      for (int d = 0; d < kDim; ++d) e += double(float(q[i * kDim + d])) * double(float(k[j * kDim + d]));
      exact[i * kTile + j] = e;
      top = std::max(top, std::fabs(e));
      s[0][i * kTile + j] = all[i * kTile + j];
      s[1][i * kTile + j] = all[tile + j * kTile + i];
      s[2][i * kTile + j] = all[2 * tile + i * kTile + j];
      s[3][i * kTile + j] = all[3 * tile + j * kTile + i];
      s[4][i * kTile + j] = all[4 * tile + i * kWide + j];
    }
  }
  const char* names[5] = {"wgmma n64, Q as A", "wgmma n64, K as A (sm90 backward)", "mma.sync, Q as A",
                          "mma.sync, K as A", "wgmma n128, Q as A (sm90 forward)"};
  std::printf("%s, inputs normal(0, %g), one %d x %d x %d tile:\n", name, scale, kTile, kTile, kDim);
  for (int v = 0; v < 5; ++v) {
    double err = 0;
    for (size_t i = 0; i < tile; ++i) err = std::max(err, std::fabs(s[v][i] - exact[i]));
    std::printf("  %-44s max |S - exact| / max |exact| %.3e\n", names[v], err / top);
  }
  compare("wgmma Q as A vs wgmma K as A:", s[0], s[1]);
  compare("mma.sync Q as A vs wgmma K as A:", s[2], s[1]);
  compare("mma.sync Q as A vs mma.sync K as A:", s[2], s[3]);
  compare("wgmma Q as A vs mma.sync Q as A:", s[0], s[2]);
  compare("wgmma n128 Q as A vs wgmma n64 K as A:", s[4], s[1]);
  compare("wgmma n128 Q as A vs mma.sync Q as A:", s[4], s[2]);
  // The forward's instruction against the backward's.
  return std::memcmp(s[4].data(), s[1].data(), tile * sizeof(float)) == 0 ? 0 : 1;
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
                  "  with wgmma n64 and mma.sync, each taking Q as A and K as A, and with wgmma n128 (Q as A,\n"
                  "  the sm90 forward's shape), and reports which agree bit for bit. Exit status 0: the\n"
                  "  forward's n128 S agrees with the backward's n64 S^T; 1: they differ; 2: CUDA error.\n");
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
