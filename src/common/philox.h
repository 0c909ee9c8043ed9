// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout mask built on it. This header is the specification of which elements dropout drops:
// the reference, the CPU backend and every CUDA kernel call philox_keep() or reproduce its bits.
//
// Element (b, h, i, j) of a (batch, query head, query row, key column), i and j counted inside
// the sequence, bh = b * Hq + h:
//   counter = { j / 4, i, bh, lo32(offset) },  key = { lo32(seed), hi32(seed) ^ hi32(offset) }
//   r       = Philox4x32-10(counter, key)[j % 4]
//   kept   <=> r >= floor(p * 2^32)
// One Philox call covers four adjacent columns, so a kernel that owns columns 4c..4c+3 of a row
// calls it once.
#pragma once
#include <cstdint>

#include "host_device.h"

namespace flashtrain {

struct Philox4 {
  uint32_t x[4];
};

namespace philox_detail {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

FT_HOST_DEVICE uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}
}  // namespace philox_detail

FT_HOST_DEVICE Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                     uint32_t k0, uint32_t k1) {
  using namespace philox_detail;
  FT_UNROLL
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint32_t hi0 = mulhi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = mulhi(kMul1, c2), lo1 = kMul1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Integer threshold for dropout probability p in [0, 1): an element is kept iff r >= threshold.
FT_HOST_DEVICE uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(p * 4294967296.0);
}

// The four random words covering columns 4 * (j / 4) .. 4 * (j / 4) + 3 of row i.
FT_HOST_DEVICE Philox4 dropout_bits(uint64_t seed, uint64_t offset, uint32_t bh, uint32_t i,
                                    uint32_t j_group) {
  return philox4x32_10(j_group, i, bh, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32));
}

FT_HOST_DEVICE bool philox_keep(uint64_t seed, uint64_t offset, uint32_t bh, uint32_t i, uint32_t j,
                                uint32_t threshold) {
  const Philox4 r = dropout_bits(seed, offset, bh, i, j >> 2);
  return r.x[j & 3] >= threshold;
}

}  // namespace flashtrain
