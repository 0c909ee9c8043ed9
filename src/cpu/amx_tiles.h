// The bf16 tile products of the CPU forward's AMX path, written against an abstract set of eight
// tile registers so that the same blocking and addressing code runs on the hardware (amx.cpp)
// and on EmulatedTiles, the plain C++ statement of what TDPBF16PS computes, which the tests run
// on every machine. Nothing here uses an intrinsic: this header is safe to include anywhere.
//
// Layouts (Intel SDM vol. 1, ch. 20):
//   A  row-major bf16 [rows][lda], each tile 16 rows x 32 bf16 (64 bytes) of it;
//   B  "VNNI": bf16 pairs interleaved along K, [k_pad / 2][n_pad][2], element (k, n) at
//      ((k / 2) * n_pad + n) * 2 + k % 2; each tile 16 pair-rows x 16 columns of it;
//   C  row-major fp32 [rows][ldc], each tile 16 rows x 16 columns.
// Every tile is configured as 16 rows of 64 bytes, so operands are zero-padded to whole tiles.
#pragma once
#include <cstdint>
#include <cstring>

#include "../common/dtype.h"

namespace flashtrain::cpu {

constexpr int64_t kAmxRows = 16;       // rows of every tile
constexpr int64_t kAmxRowBytes = 64;   // bytes of every tile row
constexpr int64_t kAmxCols = 16;       // fp32 columns of a C tile, and VNNI columns of a B tile
constexpr int64_t kAmxK = 32;          // bf16 of K per A tile row (two per B tile row)
constexpr int64_t kAmxBlockRows = 2 * kAmxRows;  // rows of C per block (two A tiles)
constexpr int64_t kAmxBlockCols = 2 * kAmxCols;  // columns of C per block (two B tiles)

constexpr int64_t amx_k_padded(int64_t k) { return (k + kAmxK - 1) / kAmxK * kAmxK; }

// dst = B in VNNI layout [k_pad / 2][n_pad][2] bf16, with B(k, n) = src[k * k_stride + n * n_stride]
// for k < k_valid, n < n_valid and 0 elsewhere. src holds fp32 copies of bf16 values (the packed
// key tiles), so the conversion back is exact.
inline void pack_vnni(const float* src, int64_t k_stride, int64_t n_stride, int64_t k_valid,
                      int64_t n_valid, int64_t k_pad, int64_t n_pad, uint16_t* dst) {
  for (int64_t k = 0; k < k_pad; ++k) {
    uint16_t* row = dst + (k / 2) * n_pad * 2 + k % 2;
    for (int64_t n = 0; n < n_pad; ++n)
      row[2 * n] = k < k_valid && n < n_valid ? float_to_bf16(src[k * k_stride + n * n_stride]) : 0;
  }
}

// Tile register numbers of the block product below: four accumulators, two A and two B tiles.
enum AmxTile : int { kC00 = 0, kC10 = 1, kC01 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

// C[rows][ncols] (+)= A[rows][k_pad] B[k_pad][ncols] in blocks of 32 x 32 (32 x 16 for a last odd
// column tile): per block, each K step of 32 loads two A and up to two B tiles and issues up to
// four tile products. rows a multiple of 32, k_pad of 32, ncols of 16. lda (bf16), ldb (bf16 per
// VNNI pair-row, 2 * n_pad) and ldc (fp32) are element strides. Each C element is summed over K
// in order, so results do not depend on the thread or the call.
// Tiles provides load(t, ptr, stride_bytes), store(t, ptr, stride_bytes), zero(t) and
// dot(c, a, b), with tile numbers that are compile-time constants after inlining.
template <typename Tiles>
inline void amx_gemm(Tiles& t, float* c, int64_t ldc, bool accumulate, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, int64_t rows, int64_t k_pad, int64_t ncols) {
  const int64_t c_stride = ldc * 4, a_stride = lda * 2, b_stride = ldb * 2;
  for (int64_t r = 0; r < rows; r += kAmxBlockRows) {
    for (int64_t col = 0; col < ncols; col += kAmxBlockCols) {
      const bool two = col + kAmxBlockCols <= ncols;
      float* c0 = c + r * ldc + col;
      float* c1 = c0 + kAmxRows * ldc;
      if (accumulate) {
        t.load(kC00, c0, c_stride);
        t.load(kC10, c1, c_stride);
        if (two) t.load(kC01, c0 + kAmxCols, c_stride);
        if (two) t.load(kC11, c1 + kAmxCols, c_stride);
      } else {
        t.zero(kC00);
        t.zero(kC10);
        if (two) t.zero(kC01);
        if (two) t.zero(kC11);
      }
      for (int64_t k = 0; k < k_pad; k += kAmxK) {
        const uint16_t* ak = a + r * lda + k;
        const uint16_t* bk = b + (k / 2) * ldb + col * 2;
        t.load(kA0, ak, a_stride);
        t.load(kA1, ak + kAmxRows * lda, a_stride);
        t.load(kB0, bk, b_stride);
        t.dot(kC00, kA0, kB0);
        t.dot(kC10, kA1, kB0);
        if (two) {
          t.load(kB1, bk + kAmxCols * 2, b_stride);
          t.dot(kC01, kA0, kB1);
          t.dot(kC11, kA1, kB1);
        }
      }
      t.store(kC00, c0, c_stride);
      t.store(kC10, c1, c_stride);
      if (two) t.store(kC01, c0 + kAmxCols, c_stride);
      if (two) t.store(kC11, c1 + kAmxCols, c_stride);
    }
  }
}

// What the tile instructions do, element by element: TILELOADD / TILESTORED copy 16 rows of 64
// bytes; TDPBF16PS adds, for each K pair in order, the two exact bf16 products to the fp32
// accumulator. (The hardware also treats bf16 denormal inputs as zero; the emulation does not.)
struct EmulatedTiles {
  unsigned char reg[8][kAmxRows * kAmxRowBytes] = {};

  void load(int t, const void* p, int64_t stride) {
    for (int64_t r = 0; r < kAmxRows; ++r)
      std::memcpy(reg[t] + r * kAmxRowBytes, static_cast<const unsigned char*>(p) + r * stride, kAmxRowBytes);
  }
  void store(int t, void* p, int64_t stride) const {
    for (int64_t r = 0; r < kAmxRows; ++r)
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, reg[t] + r * kAmxRowBytes, kAmxRowBytes);
  }
  void zero(int t) { std::memset(reg[t], 0, sizeof reg[t]); }
  void dot(int c, int a, int b) {
    float acc[kAmxRows][kAmxCols];
    uint16_t av[kAmxRows][kAmxK], bv[kAmxRows][kAmxCols * 2];
    std::memcpy(acc, reg[c], sizeof acc);
    std::memcpy(av, reg[a], sizeof av);
    std::memcpy(bv, reg[b], sizeof bv);
    for (int64_t m = 0; m < kAmxRows; ++m)
      for (int64_t n = 0; n < kAmxCols; ++n)
        for (int64_t p = 0; p < kAmxK / 2; ++p) {
          acc[m][n] += bf16_to_float(av[m][2 * p]) * bf16_to_float(bv[p][2 * n]);
          acc[m][n] += bf16_to_float(av[m][2 * p + 1]) * bf16_to_float(bv[p][2 * n + 1]);
        }
    std::memcpy(reg[c], acc, sizeof acc);
  }
};

}  // namespace flashtrain::cpu
