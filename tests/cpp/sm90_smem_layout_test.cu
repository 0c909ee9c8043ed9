// The sm90 backward's hand-computed shared-memory store addresses (src/cuda/sm90/
// bwd_smem_stores_sm90.h) against CuTe's layouts of the same tiles, for every thread of the block
// and every value it stores, at every head dim the kernels have; the split-D kernel's transposed
// view of its dS^T buffers; the wide-key-tile kernel's P / dS buffers and dK / dV staging. Host-only: it runs without a GPU.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/sm90/bwd_kernel_traits_sm90.h"
#include "cuda/sm90/bwd_smem_stores_sm90.h"
#include "cuda/sm90/bwd_split_traits_sm90.h"
#include "cuda/sm90/bwd_wide_epilogue_sm90.h"
#include "cuda/sm90/bwd_wide_traits_sm90.h"

namespace {

using namespace cute;
using flashtrain::cuda::sm90::BwdSplitTraits;
using flashtrain::cuda::sm90::BwdTraits;
using flashtrain::cuda::sm90::BwdWideTraits;

// Byte offsets come from pointer differences over a 1024-byte-aligned host buffer: CuTe's swizzle
// acts on address bits, as it does on the device's shared-memory addresses.
struct AlignedBuffer {
  std::vector<char> bytes = std::vector<char>(1 << 20);
  char* base() { return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(bytes.data()) + 1023) & ~uintptr_t{1023}); }
};

// For every consumer thread, buffer and value: the byte offset of CuTe's partition of the tile
// (partition(tid, b): that thread's values in buffer b, over `base`) against ours(tid, i, b). Reports
// the first five differences under `what` and returns their number.
template <class Partition, class Ours>
int offset_mismatches(const char* what, int threads, int buffers, const char* base, Partition partition, Ours ours) {
  int mismatches = 0;
  for (int tid = 0; tid < threads; ++tid) {
    for (int b = 0; b < buffers; ++b) {
      auto t = partition(tid, b);
      for (int i = 0; i < size(t); ++i) {
        const long cute_offset = reinterpret_cast<const char*>(&t(i)) - base;
        const long mine = ours(tid, i, b);
        if (cute_offset != mine && ++mismatches <= 5)
          ADD_FAILURE() << what << ": thread " << tid << " value " << i << " buffer " << b << ": CuTe offset "
                        << cute_offset << ", ours " << mine;
      }
    }
  }
  return mismatches;
}

template <int kHeadDim>
void check_ds_offsets() {
  using Traits = BwdTraits<kHeadDim, cutlass::bfloat16_t>;
  namespace sm90 = flashtrain::cuda::sm90;
  AlignedBuffer buffer;
  char* base = buffer.base();
  Tensor sdSt = make_tensor(make_smem_ptr(reinterpret_cast<cutlass::bfloat16_t*>(base)), typename Traits::SmemLayoutdSt{});
  typename Traits::TiledMmaSdP mma;
  const std::string what = "dS^T, D " + std::to_string(kHeadDim);
  EXPECT_EQ(offset_mismatches(
                what.c_str(), Traits::kNumMmaThreads, Traits::kStagesdS, base,
                [&](int tid, int b) { return mma.get_thread_slice(tid).partition_C(sdSt)(_, _, _, b); },
                [](int tid, int i, int b) {
                  return long{sm90::ds_pair_offset<Traits>(sm90::ds_thread_base<Traits>(tid), i / 2, b)} + 2 * (i % 2);
                }),
            0);
}

template <int kHeadDim>
void check_dq_offsets() {
  using Traits = BwdTraits<kHeadDim, cutlass::bfloat16_t>;
  namespace sm90 = flashtrain::cuda::sm90;
  AlignedBuffer buffer;
  char* base = buffer.base();
  Tensor sdQ = make_tensor(make_smem_ptr(reinterpret_cast<float*>(base)), typename Traits::SmemLayoutdQ{});
  typename Traits::TiledMmadQ mma;
  const std::string what = "dQ staging, D " + std::to_string(kHeadDim);
  EXPECT_EQ(offset_mismatches(
                what.c_str(), Traits::kNumMmaThreads, 1, base,
                [&](int tid, int) { return mma.get_thread_slice(tid).partition_C(sdQ); },
                [](int tid, int i, int) {
                  return long{sm90::dq_pair_offset<Traits>(sm90::dq_thread_base<Traits>(tid), i / 2)} + 4 * (i % 2);
                }),
            0);
}

// Split-D kernel: P^T / dS^T stores (pds_pair_offset) against the S^T MMA's partition of
// SmemLayoutPdS, and the dQ GEMM's view SmemLayoutdSt(q, k, b) on the bytes of PdS(k, q, b).
void check_split_pds_offsets() {
  using Traits = BwdSplitTraits<256, cutlass::bfloat16_t>;
  using E = cutlass::bfloat16_t;
  AlignedBuffer buffer;
  char* base = buffer.base();
  Tensor sPdS = make_tensor(make_smem_ptr(reinterpret_cast<E*>(base)), typename Traits::SmemLayoutPdS{});
  Tensor sdSt = make_tensor(make_smem_ptr(reinterpret_cast<E*>(base)), typename Traits::SmemLayoutdSt{});
  typename Traits::TiledMmaSdP mma;
  namespace sm90 = flashtrain::cuda::sm90;
  int mismatches = offset_mismatches(
      "split P^T / dS^T", Traits::kNumMmaThreads, Traits::kStagesPdS, base,
      [&](int tid, int b) { return mma.get_thread_slice(tid).partition_C(sPdS)(_, _, _, b); },
      [](int tid, int i, int b) {
        return long{sm90::pds_pair_offset<Traits>(sm90::pds_thread_base<Traits>(tid), i / 2, b)} + 2 * (i % 2);
      });
  for (int b = 0; b < Traits::kStagesPdS; ++b)
    for (int q = 0; q < Traits::kBlockM; ++q)
      for (int k = 0; k < Traits::kBlockN; ++k)
        if (&sdSt(q, k, b) != &sPdS(k, q, b) && ++mismatches <= 10)
          ADD_FAILURE() << "split dS view: (q " << q << ", k " << k << ", b " << b << ") at "
                        << reinterpret_cast<char*>(&sdSt(q, k, b)) - base << ", dS^T's at "
                        << reinterpret_cast<char*>(&sPdS(k, q, b)) - base;
  EXPECT_EQ(mismatches, 0);
}

// Wide-key-tile kernel: P / dS stores (wide_pds_thread_base + wide_pds_value_offset) against the
// S MMA's partition of the (queries x keys) view SmemLayoutPdSt, which must also be the bytes of
// SmemLayoutPdS (keys x queries), the dV / dK GEMMs' B operand.
void check_wide_pds_offsets() {
  using Traits = BwdWideTraits<256, cutlass::bfloat16_t>;
  using E = cutlass::bfloat16_t;
  AlignedBuffer buffer;
  char* base = buffer.base();
  Tensor sPdS = make_tensor(make_smem_ptr(reinterpret_cast<E*>(base)), typename Traits::SmemLayoutPdS{});
  Tensor sPdSt = make_tensor(make_smem_ptr(reinterpret_cast<E*>(base)), typename Traits::SmemLayoutPdSt{});
  typename Traits::TiledMmaSdP mma;
  namespace sm90 = flashtrain::cuda::sm90;
  int mismatches = offset_mismatches(
      "wide P / dS", Traits::kNumMmaThreads, Traits::kStagesPdS, base,
      [&](int tid, int b) { return mma.get_thread_slice(tid).partition_C(sPdSt)(_, _, _, b); },
      [](int tid, int i, int b) {
        return long{sm90::wide_pds_thread_base<Traits>(tid)} + sm90::wide_pds_value_offset<Traits>(i, b);
      });
  for (int b = 0; b < Traits::kStagesPdS; ++b)
    for (int q = 0; q < Traits::kBlockM; ++q)
      for (int k = 0; k < Traits::kBlockN; ++k)
        if (&sPdSt(q, k, b) != &sPdS(k, q, b) && ++mismatches <= 10)
          ADD_FAILURE() << "wide dS view: (q " << q << ", k " << k << ", b " << b << ")";
  EXPECT_EQ(mismatches, 0);
}

// Wide-key-tile kernel's dK / dV staging: each thread's value i (CuTe's (d, key) of the dK^T MMA's
// partition) goes to wide_dkv_staging_offset(key, d), which our thread base + constant reproduces;
// the offsets of the whole tile are a permutation of its 2-byte slots, and each 16-byte chunk the
// copy-out reads (staging_offset(key, 8 c)) holds d = 8 c .. 8 c + 7 in order.
void check_wide_dkv_staging() {
  using Traits = BwdWideTraits<256, cutlass::bfloat16_t>;
  namespace sm90 = flashtrain::cuda::sm90;
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN;
  typename Traits::TiledMmadKV mma;
  int mismatches = 0;
  std::vector<int> hits(kD * kN, 0);
  for (int tid = 0; tid < Traits::kNumMmaThreads; ++tid) {
    Tensor coord = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kD>, Int<kN>>{}));
    const uint32_t thread_base = sm90::wide_dkv_thread_base<Traits>(tid);
    for (int i = 0; i < size(coord); ++i) {
      const int d = get<0>(coord(i)), key = get<1>(coord(i));
      const uint32_t expected = sm90::wide_dkv_staging_offset<Traits>(key, d);
      const uint32_t ours = thread_base + sm90::wide_dkv_value_offset<Traits>(i);
      if (ours != expected && ++mismatches <= 5)
        ADD_FAILURE() << "wide dK / dV staging: thread " << tid << " value " << i << " (d " << d << ", key " << key
                      << "): expected " << expected << ", ours " << ours;
      if (expected % 2 == 0 && expected / 2 < hits.size()) ++hits[expected / 2];
    }
  }
  for (std::size_t slot = 0; slot < hits.size(); ++slot)
    if (hits[slot] != 1 && ++mismatches <= 10) ADD_FAILURE() << "staging slot " << slot << " written " << hits[slot] << " times";
  for (int key = 0; key < kN; ++key)
    for (int d = 0; d < kD; ++d)
      if (sm90::wide_dkv_staging_offset<Traits>(key, d) != sm90::wide_dkv_staging_offset<Traits>(key, d / 8 * 8) + 2 * (d % 8) &&
          ++mismatches <= 15)
        ADD_FAILURE() << "staging chunk of key " << key << " does not hold d " << d << " in order";
  EXPECT_EQ(mismatches, 0);
}

TEST(Sm90SmemLayout, DsStoreOffsetsMatchCuteD64) { check_ds_offsets<64>(); }
TEST(Sm90SmemLayout, DsStoreOffsetsMatchCuteD128) { check_ds_offsets<128>(); }
TEST(Sm90SmemLayout, DqStagingOffsetsMatchCuteD64) { check_dq_offsets<64>(); }
TEST(Sm90SmemLayout, DqStagingOffsetsMatchCuteD128) { check_dq_offsets<128>(); }
TEST(Sm90SmemLayout, SplitPdSOffsetsAndDsViewMatchCuteD256) { check_split_pds_offsets(); }
TEST(Sm90SmemLayout, WidePdSOffsetsAndViewMatchCuteD256) { check_wide_pds_offsets(); }
TEST(Sm90SmemLayout, WideDkDvStagingMatchesCuteD256) { check_wide_dkv_staging(); }

}  // namespace
