// The sm90 backward's hand-computed shared-memory store addresses (src/cuda/sm90/
// bwd_smem_stores_sm90.h) against CuTe's layouts of the same tiles, for every thread of the block
// and every value it stores, at every head dim the kernels have; the split-D kernel's transposed
// view of its dS^T buffers; the wide-key-tile kernel's P / dS buffers, dK / dV staging and its dQ
// reductions' lane pairs; and that each of those hand-offset store loops is free of bank
// conflicts. Host-only: it runs without a GPU.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/common/dq_column_order.h"
#include "cuda/sm90/bwd_dq_atomics_sm90.h"
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

// Whether view(q, k, b) and view_t(k, q, b) are the same element for every query q < rows, key
// k < cols and buffer b: the number that are not, the first ten reported under `what` with their
// byte offsets from `base`.
template <class View, class ViewT>
int transposed_view_mismatches(const char* what, const View& view, const ViewT& view_t, int rows, int cols,
                               int buffers, const char* base) {
  int mismatches = 0;
  for (int b = 0; b < buffers; ++b)
    for (int q = 0; q < rows; ++q)
      for (int k = 0; k < cols; ++k)
        if (&view(q, k, b) != &view_t(k, q, b) && ++mismatches <= 10)
          ADD_FAILURE() << what << ": (q " << q << ", k " << k << ", b " << b << ") at "
                        << reinterpret_cast<const char*>(&view(q, k, b)) - base << ", the transposed view's at "
                        << reinterpret_cast<const char*>(&view_t(k, q, b)) - base;
  return mismatches;
}

// Wavefronts one warp's shared-memory store takes when lane l writes `bytes` at byte offset
// offsets[l] (from a 1024-byte-aligned base). The warp goes through in phases of 128 bytes of
// lanes (one phase up to 32-bit stores, half-warps for 64-bit ones, quarter-warps for 128-bit),
// and each phase takes the most distinct 4-byte words any of the 32 banks receives from it, a
// 128-byte wavefront serving one word a bank. (Counting the whole warp at once instead misses a
// bank that one half-warp hits twice while the other leaves it idle: the D 64 / 128 dQ staging's
// 64-bit stores took 4 wavefronts in run 48's ncu table, 2 by the whole-warp count.)
int store_wavefronts(const std::vector<long>& offsets, int bytes) {
  const int lanes_per_phase = std::min(32, 128 / bytes);
  int total = 0;
  for (int first = 0; first < 32; first += lanes_per_phase) {
    std::map<long, std::set<long>> words_by_bank;
    for (int lane = first; lane < first + lanes_per_phase; ++lane)
      for (int b = 0; b < bytes; b += 4) words_by_bank[((offsets[lane] + b) / 4) % 32].insert((offsets[lane] + b) / 4);
    int most = 0;
    for (const auto& [bank, words] : words_by_bank) most = std::max(most, static_cast<int>(words.size()));
    total += most;
  }
  return total;
}

// Every warp's store instructions of a hand-offset store loop (store s of thread tid at
// ours(tid, s), `bytes` each): each must take the fewest wavefronts its 32 lanes' bytes allow
// (1 up to 128 bytes, 2 for 64-bit stores), i.e. no bank conflict. Reports the first five.
template <class Ours>
int conflicted_stores(const std::string& what, int threads, int stores, int bytes, Ours ours) {
  const int fewest = std::max(1, 32 * bytes / 128);
  int conflicted = 0;
  for (int warp = 0; warp < threads / 32; ++warp) {
    for (int st = 0; st < stores; ++st) {
      std::vector<long> offsets;
      for (int lane = 0; lane < 32; ++lane) offsets.push_back(ours(32 * warp + lane, st));
      const int wavefronts = store_wavefronts(offsets, bytes);
      if (wavefronts != fewest && ++conflicted <= 5)
        ADD_FAILURE() << what << ": warp " << warp << " store " << st << " takes " << wavefronts
                      << " wavefronts, " << fewest << " possible";
    }
  }
  return conflicted;
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
  Tensor sdQ = make_tensor(make_smem_ptr(reinterpret_cast<float*>(base)), typename Traits::SmemLayoutdQLogical{});
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
  mismatches += transposed_view_mismatches("split dS view", sdSt, sPdS, Traits::kBlockM, Traits::kBlockN,
                                           Traits::kStagesPdS, base);
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
  mismatches += transposed_view_mismatches("wide dS view", sPdSt, sPdS, Traits::kBlockM, Traits::kBlockN,
                                           Traits::kStagesPdS, base);
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

// Wide-key-tile kernel's 16-byte dQ reductions (add_rows_reduce_quads): per accumulator row r and
// column group c (4 values), the even lane adds its own pair (r, c), (r, c + 1) and its partner's
// (lane ^ 1) pair of the same (r, c); the odd lane its partner's (r, c + 2), (r, c + 3) and its own;
// each at the address add_rows_reduce_quads computes (row base + own column of (r, c), + 6 on odd
// lanes). Checked against CuTe's coordinates of the dQ slice MMA: the 4 sources sit at that
// column and the 3 after it in one row, both lanes of a pair hold the same rows, and the slice's
// elements are each added exactly once.
void check_wide_dq_quads() {
  using Traits = BwdWideTraits<256, cutlass::bfloat16_t>;
  constexpr int kM = Traits::kBlockM, kC = Traits::kDqSliceCols;
  typename Traits::TiledMmadQ mma;
  auto rowcol = [&](int tid) {
    Tensor coord = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kM>, Int<kC>>{}));
    return make_tensor(coord.data(), flashtrain::cuda::sm90::accumulator_rowcol(coord.layout()));
  };
  int mismatches = 0;
  std::vector<int> hits(kM * kC, 0);
  for (int tid = 0; tid < Traits::kNumMmaThreads; ++tid) {
    const bool odd = tid % 2 == 1;
    auto mine = rowcol(tid);
    auto partner = rowcol(tid ^ 1);
    for (int r = 0; r < size<0>(mine); ++r) {
      const int row = get<0>(mine(r, 0)), col0 = get<1>(mine(r, 0));
      for (int c = 0; c < size<1>(mine); c += 4) {
        const int target = col0 + (odd ? 6 : 0) + (get<1>(mine(r, c)) - col0);
        const auto sources = odd ? std::vector<int>{get<1>(partner(r, c + 2)), get<1>(partner(r, c + 3)),
                                                    get<1>(mine(r, c + 2)), get<1>(mine(r, c + 3))}
                                 : std::vector<int>{get<1>(mine(r, c)), get<1>(mine(r, c + 1)), get<1>(partner(r, c)),
                                                    get<1>(partner(r, c + 1))};
        for (int j = 0; j < 4; ++j) {
          const int src_row = j < 2 ? get<0>(odd ? partner(r, c + 2 + j) : mine(r, c + j))
                                    : get<0>(odd ? mine(r, c + j) : partner(r, c + j - 2));
          if ((sources[j] != target + j || src_row != row) && ++mismatches <= 5)
            ADD_FAILURE() << "wide dQ quad: thread " << tid << " row index " << r << " column index " << c << " value "
                          << j << ": source (" << src_row << ", " << sources[j] << "), target (" << row << ", "
                          << target + j << ")";
          if (row < kM && target + j >= 0 && target + j < kC) ++hits[row * kC + target + j];
        }
        if (target % 4 != 0 && ++mismatches <= 5)
          ADD_FAILURE() << "wide dQ quad: thread " << tid << " target column " << target << " not 16-byte aligned";
      }
    }
  }
  for (std::size_t e = 0; e < hits.size(); ++e)
    if (hits[e] != 1 && ++mismatches <= 10) ADD_FAILURE() << "dQ slice element " << e << " added " << hits[e] << " times";
  EXPECT_EQ(mismatches, 0);
}

// The hand-offset stores (bwd_smem_stores_sm90.h) are free of bank conflicts: dS^T and the
// split-D kernel's P^T / dS^T as 32-bit pairs (one wavefront a warp store), the dQ staging as 64-bit pairs (two), the wide kernel's P / dS as 16-bit values (one).
template <int kHeadDim>
int conflicted_ds_dq_stores() {
  using Traits = BwdTraits<kHeadDim, cutlass::bfloat16_t>;
  namespace sm90 = flashtrain::cuda::sm90;
  constexpr int kDsPairs = 64 * Traits::kBlockM / 128 / 2;  // a warpgroup's 64 keys x kBlockM queries
  constexpr int kDqPairs = Traits::kBlockM * (kHeadDim / 2) / 128 / 2;  // kBlockM rows x its D / 2 columns
  const std::string d = ", D " + std::to_string(kHeadDim);
  return conflicted_stores("dS^T" + d, Traits::kNumMmaThreads, kDsPairs, 4,
                           [](int tid, int j) { return long{sm90::ds_pair_offset<Traits>(sm90::ds_thread_base<Traits>(tid), j, 0)}; }) +
         conflicted_stores("dQ staging" + d, Traits::kNumMmaThreads, kDqPairs, 8,
                           [](int tid, int j) { return long{sm90::dq_pair_offset<Traits>(sm90::dq_thread_base<Traits>(tid), j)}; });
}

TEST(Sm90SmemLayout, HandStoresAreConflictFree) {
  namespace sm90 = flashtrain::cuda::sm90;
  using Split = BwdSplitTraits<256, cutlass::bfloat16_t>;
  using Wide = BwdWideTraits<256, cutlass::bfloat16_t>;
  int conflicted = conflicted_ds_dq_stores<64>() + conflicted_ds_dq_stores<128>();
  conflicted += conflicted_stores("split P^T / dS^T", Split::kNumMmaThreads, Split::kBlockN * Split::kQueriesPerWarpGroup / 128 / 2, 4,
                                  [](int tid, int j) { return long{sm90::pds_pair_offset<Split>(sm90::pds_thread_base<Split>(tid), j, 0)}; });
  conflicted += conflicted_stores("wide P / dS", Wide::kNumMmaThreads, Wide::kBlockM * Wide::kKeysPerWarpGroup / 128, 2,
                                  [](int tid, int i) { return long{sm90::wide_pds_thread_base<Wide>(tid) + sm90::wide_pds_value_offset<Wide>(i, 0)}; });
  EXPECT_EQ(conflicted, 0);
}

TEST(Sm90SmemLayout, DsStoreOffsetsMatchCuteD64) { check_ds_offsets<64>(); }
TEST(Sm90SmemLayout, DsStoreOffsetsMatchCuteD128) { check_ds_offsets<128>(); }
// The convert kernel's reading of the staged dQ order (staged_dq_chunk) is the traits' layout of it.
template <int kHeadDim>
void check_staged_dq_order() {
  using Order = typename BwdTraits<kHeadDim, cutlass::bfloat16_t>::DqColumnOrder;
  static_assert(size(Order{}) == kHeadDim, "a staged column for every column");
  std::set<int> staged;
  for (int c = 0; c < kHeadDim; ++c) {
    const int convert = 32 * (c / 32) + 4 * flashtrain::cuda::staged_dq_chunk((c % 32) / 4) + c % 4;
    EXPECT_EQ(static_cast<int>(Order{}(c)), convert) << "column " << c << ", D " << kHeadDim;
    staged.insert(convert);
  }
  EXPECT_EQ(static_cast<int>(staged.size()), kHeadDim);  // a permutation
}

TEST(Sm90SmemLayout, StagedDqOrderMatchesConvertD64) { check_staged_dq_order<64>(); }
TEST(Sm90SmemLayout, StagedDqOrderMatchesConvertD128) { check_staged_dq_order<128>(); }
TEST(Sm90SmemLayout, DqStagingOffsetsMatchCuteD64) { check_dq_offsets<64>(); }
TEST(Sm90SmemLayout, DqStagingOffsetsMatchCuteD128) { check_dq_offsets<128>(); }
TEST(Sm90SmemLayout, SplitPdSOffsetsAndDsViewMatchCuteD256) { check_split_pds_offsets(); }
TEST(Sm90SmemLayout, WidePdSOffsetsAndViewMatchCuteD256) { check_wide_pds_offsets(); }
TEST(Sm90SmemLayout, WideDkDvStagingMatchesCuteD256) { check_wide_dkv_staging(); }
TEST(Sm90SmemLayout, WideDqQuadReductionsMatchCute) { check_wide_dq_quads(); }

}  // namespace
