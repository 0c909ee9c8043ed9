// The README's C++ example: forward and backward of causal GQA attention in bf16 on the CPU.
// Built and run by ctest (example_cpp_usage); exits non-zero if anything looks wrong.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <algorithm>
#include <vector>

#include "flashtrain/attention.h"

using flashtrain::DType;
using flashtrain::TensorView;

// bf16 is the top half of a float's bits (round to nearest even).
static uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

int main() {
  const int64_t B = 2, S = 300, Hq = 8, Hk = 2, D = 64;
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  auto random_bf16 = [&](int64_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = to_bf16(normal(gen));
    return v;
  };
  std::vector<uint16_t> q = random_bf16(B * S * Hq * D), k = random_bf16(B * S * Hk * D),
                        v = random_bf16(B * S * Hk * D), dout = random_bf16(B * S * Hq * D);
  std::vector<uint16_t> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(B * Hq * S);

  auto bshd = [](void* p, int64_t h) { return TensorView::contiguous(p, DType::kBFloat16, {B, S, h, D}); };
  TensorView tq = bshd(q.data(), Hq), tk = bshd(k.data(), Hk), tv = bshd(v.data(), Hk);
  TensorView tout = bshd(out.data(), Hq), tdout = bshd(dout.data(), Hq);
  TensorView tlse = TensorView::contiguous(lse.data(), DType::kFloat32, {B, Hq, S});

  flashtrain::AttentionOptions opts;
  opts.causal = true;  // bottom-right aligned, like FlashAttention
  flashtrain::forward(tq, tk, tv, tout, tlse, opts);
  flashtrain::backward(tq, tk, tv, tout, tlse, tdout, bshd(dq.data(), Hq), bshd(dk.data(), Hk),
                       bshd(dv.data(), Hk), opts);

  // Row 0 sees only key 0, so out[0, 0, h] == v[0, 0, h / 4] and lse == scale * q.k.
  double worst = 0.0;
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t d = 0; d < D; ++d)
      worst = std::max<double>(worst, std::fabs(from_bf16(out[h * D + d]) - from_bf16(v[(h / 4) * D + d])));
  bool finite = true;
  for (uint16_t x : dq) finite = finite && std::isfinite(from_bf16(x));
  std::printf("flashtrain example: out[0,0] vs v[0,0] max diff %.3g, dq finite: %s\n", worst,
              finite ? "yes" : "no");
  // Invalid input is an exception that names the argument and the values.
  try {
    flashtrain::forward(tq, bshd(k.data(), 3), tv, tout, tlse, opts);
    return 1;
  } catch (const flashtrain::Error& e) {
    std::printf("bad input is reported:\n%s\n", e.what());
  }
  return worst == 0.0 && finite ? 0 : 1;
}
