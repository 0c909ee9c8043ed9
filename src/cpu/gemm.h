// Register-blocked fp32 tile products of the CPU backend and the 16-lane vector they are built
// from. Every tile product of forward and backward is one call of tile_gemm: C (+)= A B with B
// and C row-major, widths padded to whole vectors (kLanes), and A read through two strides, so
// that A may be a transposed view (P^T, dS^T) without a copy.
#pragma once
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace flashtrain::cpu {

constexpr int64_t kLanes = 16;

// Widths of the dense fp32 scratch tiles: rounded up to whole vectors, the padding kept zero so
// it adds nothing to any product.
constexpr int64_t padded(int64_t width) { return (width + kLanes - 1) / kLanes * kLanes; }

// 16 fp32 lanes: one zmm register with AVX-512, otherwise an array the compiler vectorises for
// whatever ISA it targets.
#if defined(__AVX512F__)
// The masked forms with an explicit source operand are used where GCC 12's plain forms pass an
// "undefined" register and trip -Wmaybe-uninitialized inside its own headers.
struct Vec {
  __m512 v;
  static constexpr __mmask16 kAll = 0xffff;
  static Vec zero() { return {_mm512_setzero_ps()}; }
  static Vec set1(float x) { return {_mm512_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  friend Vec fmadd(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend Vec max(Vec a, Vec b) { return {_mm512_mask_max_ps(a.v, kAll, a.v, b.v)}; }
  bool any_nan() const { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0; }
  // Halves, then quarters, then pairs, then neighbours: the reduction lands in lane 0.
  template <typename Op>
  float reduce(Op op) const {
    __m512 x = op(v, _mm512_mask_shuffle_f32x4(v, kAll, v, v, 0x4e));
    x = op(x, _mm512_mask_shuffle_f32x4(x, kAll, x, x, 0xb1));
    x = op(x, _mm512_mask_permute_ps(x, kAll, x, 0x4e));
    x = op(x, _mm512_mask_permute_ps(x, kAll, x, 0xb1));
    return _mm512_cvtss_f32(x);
  }
  float reduce_max() const {
    return reduce([](__m512 a, __m512 b) { return _mm512_mask_max_ps(a, kAll, a, b); });
  }
  float reduce_add() const {
    return reduce([](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
  }
};
#else
struct Vec {
  float x[kLanes];
  static Vec zero() { return set1(0.0f); }
  static Vec set1(float s) {
    Vec r;
    for (int i = 0; i < kLanes; ++i) r.x[i] = s;
    return r;
  }
  static Vec load(const float* p) {
    Vec r;
    for (int i = 0; i < kLanes; ++i) r.x[i] = p[i];
    return r;
  }
  void store(float* p) const {
    for (int i = 0; i < kLanes; ++i) p[i] = x[i];
  }
  friend Vec fmadd(Vec a, Vec b, Vec c) {
    for (int i = 0; i < kLanes; ++i) c.x[i] += a.x[i] * b.x[i];
    return c;
  }
  friend Vec operator*(Vec a, Vec b) {
    for (int i = 0; i < kLanes; ++i) a.x[i] *= b.x[i];
    return a;
  }
  friend Vec operator+(Vec a, Vec b) {
    for (int i = 0; i < kLanes; ++i) a.x[i] += b.x[i];
    return a;
  }
  friend Vec operator-(Vec a, Vec b) {
    for (int i = 0; i < kLanes; ++i) a.x[i] -= b.x[i];
    return a;
  }
  friend Vec max(Vec a, Vec b) {
    for (int i = 0; i < kLanes; ++i) a.x[i] = a.x[i] > b.x[i] ? a.x[i] : b.x[i];
    return a;
  }
  bool any_nan() const {
    bool nan = false;
    for (int i = 0; i < kLanes; ++i) nan |= x[i] != x[i];
    return nan;
  }
  float reduce_max() const {
    float m = x[0];
    for (int i = 1; i < kLanes; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  float reduce_add() const {
    float s = 0.0f;
    for (int i = 0; i < kLanes; ++i) s += x[i];
    return s;
  }
};
#endif

// Register budget: kGemmRows x kGemmVecs accumulators plus kGemmVecs B vectors and one broadcast
// A value must fit the 32 zmm registers, and each B load feeds kGemmRows FMAs.
constexpr int kGemmRows = 6;
constexpr int kGemmVecs = 4;

// C[R][NV*16] (+)= sum_k A(r, k) * B[k][:], A(r, k) = a[r * a_rs + k * a_cs]. Each output
// element is summed over k in order, so the result does not depend on the blocking.
template <int R, int NV>
inline void gemm_micro(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_cs,
                       const float* b, int64_t ldb, int64_t k, bool accumulate) {
  Vec acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? Vec::load(c + r * ldc + v * kLanes) : Vec::zero();
  for (int64_t kk = 0; kk < k; ++kk) {
    Vec bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(b + kk * ldb + v * kLanes);
    const float* ak = a + kk * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec x = Vec::set1(ak[r * a_rs]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = fmadd(x, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v].store(c + r * ldc + v * kLanes);
}

template <int R>
inline void gemm_rows(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_cs,
                      const float* b, int64_t ldb, int64_t k, int64_t ncols, bool accumulate) {
  int64_t col = 0;
  for (; col + kGemmVecs * kLanes <= ncols; col += kGemmVecs * kLanes)
    gemm_micro<R, kGemmVecs>(c + col, ldc, a, a_rs, a_cs, b + col, ldb, k, accumulate);
  switch ((ncols - col) / kLanes) {
    case 3: gemm_micro<R, 3>(c + col, ldc, a, a_rs, a_cs, b + col, ldb, k, accumulate); break;
    case 2: gemm_micro<R, 2>(c + col, ldc, a, a_rs, a_cs, b + col, ldb, k, accumulate); break;
    case 1: gemm_micro<R, 1>(c + col, ldc, a, a_rs, a_cs, b + col, ldb, k, accumulate); break;
    default: break;
  }
}

// C[m][ncols] (+)= A[m][k] B[k][ncols]; ncols a multiple of kLanes, C row stride ldc, B row
// stride ldb, A(i, kk) = a[i * a_rs + kk * a_cs].
inline void tile_gemm(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_cs,
                      const float* b, int64_t ldb, int64_t m, int64_t k, int64_t ncols,
                      bool accumulate) {
  int64_t i = 0;
  for (; i + kGemmRows <= m; i += kGemmRows)
    gemm_rows<kGemmRows>(c + i * ldc, ldc, a + i * a_rs, a_rs, a_cs, b, ldb, k, ncols, accumulate);
  float* ci = c + i * ldc;
  const float* ai = a + i * a_rs;
  switch (m - i) {
    case 5: gemm_rows<5>(ci, ldc, ai, a_rs, a_cs, b, ldb, k, ncols, accumulate); break;
    case 4: gemm_rows<4>(ci, ldc, ai, a_rs, a_cs, b, ldb, k, ncols, accumulate); break;
    case 3: gemm_rows<3>(ci, ldc, ai, a_rs, a_cs, b, ldb, k, ncols, accumulate); break;
    case 2: gemm_rows<2>(ci, ldc, ai, a_rs, a_cs, b, ldb, k, ncols, accumulate); break;
    case 1: gemm_rows<1>(ci, ldc, ai, a_rs, a_cs, b, ldb, k, ncols, accumulate); break;
    default: break;
  }
}

}  // namespace flashtrain::cpu
