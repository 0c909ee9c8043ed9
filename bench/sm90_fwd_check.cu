// sm90_fwd_check: correctness and speed of the sm90a (Hopper) forward kernel, called directly
// (flashtrain::cuda::sm90::run_fwd), independent of how backend.cu dispatches.
//
// 1. Correctness: DESIGN.md §4's rule, |X - X64| <= 2 * |Xnaive - X64| + atol for out and lse,
//    against the float64 reference and the input-dtype naive attention (src/reference/check.h),
//    outputs poisoned with NaN first (an unwritten element fails), writes outside views counted.
//    Shapes: odd lengths, Sq != Sk both ways, seqlen 1, causal bottom-right and top-left,
//    sliding windows, GQA/MQA, D = 64 / 128 / 256, fp16 and bf16, packed QKV strides, and grids
//    with more work tiles than SMs (the persistent blocks then run several tiles each).
// 2. Speed: CUDA events around batches of run_fwd launches (median over batches, after warm-up)
//    on B*S = 16k tokens, H*D = 2048, BSHD inputs, printing TFLOP/s = 4*B*H*S*S*D / time
//    (halved when causal).
//
// Build and run on an H200 from the repository root (CUTLASS headers in .cutlass/include):
//   cmake -S . -B build-sm90 -G Ninja -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
//         -DFLASHTRAIN_HDIMS="64;128;256" -DFLASHTRAIN_TESTS=OFF && ninja -C build-sm90 flashtrain
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
//        bench/sm90_fwd_check.cu build-sm90/libflashtrain.a -Xcompiler -fopenmp \
//        -o build-sm90/sm90_fwd_check
//   timeout 600 build-sm90/sm90_fwd_check   # checks, then timings; exit status 1 if a check fails
//   build-sm90/sm90_fwd_check --check    # checks only
//   build-sm90/sm90_fwd_check --bench    # timings only
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "api/problem.h"
#include "api/validate.h"
#include "cuda/sm90/launch.h"
#include "flashtrain/attention.h"
#include "reference/check.h"

using namespace flashtrain;

namespace {

constexpr int kWarmupIters = 3;
// Launches are timed in back-to-back batches so the host's per-launch work (TMA descriptor
// encoding) overlaps the previous kernel instead of idling the GPU between the events.
constexpr int kTimedBatches = 7;
constexpr int kLaunchesPerBatch = 10;
constexpr int64_t kBenchTokens = 16 * 1024;  // B * S
constexpr int64_t kBenchHiddenQ = 2048;      // H * D

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

struct CheckCase {
  std::string name;
  int64_t batch, sq, sk, hq, hk, d;
  DType dtype;
  bool causal = false;
  CausalAlign align = CausalAlign::kBottomRight;
  int64_t left = -1, right = -1;
  check::Layout layout = check::Layout::kContiguous;
  double q_std = 1.0;
};

std::vector<CheckCase> check_cases() {
  const DType bf16 = DType::kBFloat16, fp16 = DType::kFloat16;
  using check::Layout;
  std::vector<CheckCase> c;
  c.push_back({"d128 noncausal ragged", 2, 1000, 1000, 4, 4, 128, bf16});
  c.push_back({"d128 noncausal ragged fp16", 1, 777, 1031, 3, 3, 128, fp16});
  c.push_back({"d128 causal BR gqa Sq<Sk", 1, 257, 1031, 6, 2, 128, fp16, true});
  c.push_back({"d128 causal BR mqa Sq>Sk (empty rows)", 1, 1031, 257, 4, 1, 128, bf16, true});
  c.push_back({"d128 causal TL Sq<Sk", 2, 300, 700, 2, 2, 128, bf16, true, CausalAlign::kTopLeft});
  c.push_back({"d128 causal TL Sq>Sk", 1, 700, 300, 2, 1, 128, fp16, true, CausalAlign::kTopLeft});
  c.push_back({"d128 sliding window causal", 1, 900, 900, 2, 2, 128, bf16, true, CausalAlign::kBottomRight, 100, 0});
  c.push_back({"d128 large logits", 1, 333, 555, 2, 2, 128, bf16, false, CausalAlign::kBottomRight, -1, -1,
               Layout::kContiguous, 8.0});
  c.push_back({"d128 packed qkv causal", 2, 385, 385, 4, 2, 128, bf16, true, CausalAlign::kBottomRight, -1, -1,
               Layout::kPackedQKV});
  c.push_back({"d64 window (64, 32)", 1, 513, 513, 4, 4, 64, bf16, false, CausalAlign::kBottomRight, 64, 32});
  c.push_back({"d64 window TL (10, 200) fp16", 1, 600, 450, 2, 1, 64, fp16, false, CausalAlign::kTopLeft, 10, 200});
  c.push_back({"d64 Sq=1 causal", 3, 1, 4097, 2, 2, 64, fp16, true});
  c.push_back({"d64 Sk=1", 1, 129, 1, 2, 2, 64, bf16});
  c.push_back({"d64 noncausal", 2, 640, 513, 8, 2, 64, bf16});
  c.push_back({"d256 causal BR gqa", 1, 333, 555, 4, 2, 256, bf16, true});
  c.push_back({"d256 noncausal fp16", 2, 200, 129, 2, 2, 256, fp16});
  c.push_back({"d256 Sq=Sk=1", 1, 1, 1, 2, 2, 256, fp16});
  c.push_back({"d256 causal TL", 1, 400, 191, 2, 1, 256, bf16, true, CausalAlign::kTopLeft});
  // More work tiles than SMs: each persistent block runs several tiles (K/V ring and Q buffer
  // handed over between tiles; with D = 256, O staged in Q's buffer), some tiles without keys.
  c.push_back({"many tiles d64", 4, 300, 300, 40, 40, 64, bf16});
  c.push_back({"many tiles d128 causal BR empty tiles", 3, 1031, 257, 16, 4, 128, fp16, true});
  c.push_back({"many tiles d256", 2, 400, 400, 40, 20, 256, bf16});
  return c;
}

bool run_check(const CheckCase& cc) {
  check::CaseSpec spec;
  spec.name = cc.name;
  spec.batch = cc.batch;
  spec.seqlen_q = cc.sq;
  spec.seqlen_k = cc.sk;
  spec.heads_q = cc.hq;
  spec.heads_k = cc.hk;
  spec.dim_qk = spec.dim_v = cc.d;
  spec.dtype = cc.dtype;
  spec.layout = cc.layout;
  spec.q_std = cc.q_std;
  spec.k_std = cc.q_std;
  spec.backward = false;
  spec.options.causal = cc.causal;
  spec.options.align = cc.align;
  spec.options.window_left = cc.left;
  spec.options.window_right = cc.right;

  std::printf("---- %s\n", cc.name.c_str());
  check::Case c(spec);
  const check::Outputs ref = c.run(Backend::kReference);
  const check::Outputs naive = c.run_naive();
  const check::Case::Views v = c.prepare(Backend::kCUDA);
  const Problem p = make_forward_problem(v.q, v.k, v.v, v.out, v.lse, v.options);
  const std::string why = cuda::sm90::refusal(p);
  if (why.find("not built") != std::string::npos) {  // a --quick build (FLASHTRAIN_HDIMS) left it out
    std::printf("SKIP %-40s %s\n", cc.name.c_str(), why.c_str());
    return true;
  }
  if (!why.empty()) {
    std::printf("FAIL %-40s refused:\n%s\n", cc.name.c_str(), why.c_str());
    return false;
  }
  cuda::sm90::run_fwd(p, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  const check::Outputs got = c.collect(Backend::kCUDA);
  const check::Comparison out = check::compare("out", spec.dtype, got.out, ref.out, naive.out);
  const check::Comparison lse = check::compare("lse", DType::kFloat32, got.lse, ref.lse, naive.lse);
  const bool pass = out.pass && lse.pass && got.writes_outside == 0;
  std::printf("%s %-40s %s D=%lld B=%lld Sq=%lld Sk=%lld Hq=%lld Hk=%lld\n  %s\n  %s\n", pass ? "PASS" : "FAIL",
              cc.name.c_str(), check::dtype_short_name(cc.dtype), (long long)cc.d, (long long)cc.batch,
              (long long)cc.sq, (long long)cc.sk, (long long)cc.hq, (long long)cc.hk, out.describe().c_str(),
              lse.describe().c_str());
  if (got.writes_outside != 0) std::printf("  %lld writes outside the output views\n", (long long)got.writes_outside);
  return pass;
}

// Device buffer of n random 16-bit values (fp16 or bf16 bit patterns of N(0, 1) samples).
void* random_device_buffer(int64_t n, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(n));
  for (auto& h : host) {
    const float x = dist(gen);
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    if (dtype == DType::kBFloat16) {
      h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
    } else {
      const __half hv = __float2half_rn(x);
      std::memcpy(&h, &hv, sizeof(h));
    }
  }
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, host.size() * sizeof(uint16_t)));
  CHECK_CUDA(cudaMemcpy(d, host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return d;
}

void run_bench(int64_t seqlen, int64_t d, DType dtype, bool causal) {
  const int64_t batch = std::max<int64_t>(1, kBenchTokens / seqlen);
  const int64_t heads = kBenchHiddenQ / d;
  const int64_t n = batch * seqlen * heads * d;
  void* q = random_device_buffer(n, dtype, 1);
  void* k = random_device_buffer(n, dtype, 2);
  void* vv = random_device_buffer(n, dtype, 3);
  void* out = nullptr;
  float* lse = nullptr;
  CHECK_CUDA(cudaMalloc(&out, n * 2));
  CHECK_CUDA(cudaMalloc(&lse, batch * heads * seqlen * sizeof(float)));
  auto view = [&](void* ptr) {
    return TensorView::contiguous(ptr, dtype, {batch, seqlen, heads, d}, Device::kCUDA);
  };
  AttentionOptions opt;
  opt.causal = causal;
  opt.backend = Backend::kCUDA;
  const Problem p = make_forward_problem(view(q), view(k), view(vv), view(out),
                                         TensorView::contiguous(lse, DType::kFloat32, {batch, heads, seqlen}, Device::kCUDA),
                                         opt);
  const std::string why = cuda::sm90::refusal(p);
  if (!why.empty()) {
    std::printf("bench refused: %s\n", why.c_str());
    return;
  }
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmupIters; ++i) cuda::sm90::run_fwd(p, nullptr);
  std::vector<float> ms;
  for (int i = 0; i < kTimedBatches; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    for (int j = 0; j < kLaunchesPerBatch; ++j) cuda::sm90::run_fwd(p, nullptr);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / kLaunchesPerBatch);
  }
  std::sort(ms.begin(), ms.end());
  const double median_ms = ms[ms.size() / 2];
  const double flops = 4.0 * batch * heads * double(seqlen) * double(seqlen) * d * (causal ? 0.5 : 1.0);
  std::printf("bench %s D=%3lld B=%2lld S=%5lld H=%2lld %-10s %8.3f ms  %6.1f TFLOP/s\n",
              check::dtype_short_name(dtype), (long long)d, (long long)batch, (long long)seqlen,
              (long long)heads, causal ? "causal" : "noncausal", median_ms, flops / (median_ms * 1e-3) / 1e12);
  CHECK_CUDA(cudaFree(q));
  CHECK_CUDA(cudaFree(k));
  CHECK_CUDA(cudaFree(vv));
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(lse));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
}

}  // namespace

int main(int argc, char** argv) {
  const bool only_check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  const bool only_bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  // Line-buffered even when piped: a hang or crash still shows the last case started.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  int failures = 0;
  if (!only_bench) {
    for (const CheckCase& c : check_cases()) {
      try {
        failures += run_check(c) ? 0 : 1;
      } catch (const std::exception& e) {
        std::printf("FAIL %-40s threw: %s\n", c.name.c_str(), e.what());
        ++failures;
      }
    }
    std::printf("checks: %d failed\n", failures);
  }
  if (!only_check) {
    const DType bf16 = DType::kBFloat16, fp16 = DType::kFloat16;
    run_bench(8192, 128, bf16, false);  // the headline: FA3 668, cuDNN 647 TFLOP/s
    run_bench(8192, 128, bf16, true);
    run_bench(8192, 128, fp16, false);
    run_bench(8192, 64, bf16, false);
    run_bench(16384, 256, bf16, false);
    run_bench(2048, 128, bf16, false);
    run_bench(8192, 256, bf16, true);
  }
  return failures == 0 ? 0 : 1;
}
