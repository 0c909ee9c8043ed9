// The sm90a (Hopper) forward kernel called directly through flashtrain::cuda::sm90, so it is
// tested whatever backend.cu dispatches to: DESIGN.md §4's rule on out and lse for odd lengths,
// both causal alignments, sliding windows, GQA, every head dim it instantiates and both key tiles
// of D = 128 (FLASHTRAIN_FWD_KEY_TILE); and the refusal reasons for what it does not run. GPU
// cases skip unless a compute capability 9.0 device is present. bench/sm90_fwd_check.cu runs a
// wider list and times the kernel.
// The K-tile ranges the kernel visits (BlockMask) are checked on the CPU against MaskSpec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <vector>

#include "common/mask.h"
#include "cuda/common/tile_range.h"
#include "cuda/sm90/fwd_block_mask_sm90.h"

namespace flashtrain::testing {
namespace {

// A random mask case: lengths in [1, max_len], causal or not, either alignment, windows in
// [-1, max_window] (-1 = open).
struct MaskCase {
  int64_t sq, sk;
  MaskSpec spec;
};
MaskCase random_mask_case(std::mt19937& gen, int64_t max_len, int64_t max_window) {
  std::uniform_int_distribution<int64_t> len(1, max_len), window(-1, max_window), coin(0, 1);
  const int64_t sq = len(gen), sk = len(gen);
  const bool causal = coin(gen) == 1, bottom_right = coin(gen) == 1;
  const int64_t left = window(gen), right = causal ? 0 : window(gen);
  return MaskCase{sq, sk, MaskSpec{bottom_right ? sk - sq : 0, left, right, sk}};
}

// For random lengths, alignments, causal flags and windows: every visible (row, column) of a
// query block lies in a visited K tile, and every tile the kernel runs unmasked is visible in
// full for every real row of the block.
template <int kBlockM, int kBlockN>
void check_block_masks(uint32_t seed) {
  std::mt19937 gen(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const auto [sq, sk, spec] = random_mask_case(gen, 700, 300);
    for (int m_block = 0; m_block * kBlockM < sq; ++m_block) {
      const cuda::sm90::BlockMask<kBlockM, kBlockN> mask(spec, m_block, static_cast<int>(sq));
      const int64_t row_end = std::min<int64_t>((m_block + 1) * kBlockM, sq);
      for (int64_t i = m_block * kBlockM; i < row_end; ++i)
        for (int64_t j = spec.col_begin(i); j < spec.col_end(i); ++j)
          ASSERT_TRUE(j / kBlockN >= mask.n_min && j / kBlockN < mask.n_max)
              << "row " << i << " col " << j << " outside tiles [" << mask.n_min << ", " << mask.n_max
              << ") sq " << sq << " sk " << sk << " diag " << spec.diag << " window (" << spec.left << ", "
              << spec.right << ")";
      for (int n = mask.n_min; n < mask.n_max; ++n) {
        if (mask.needs_mask(n)) continue;
        for (int64_t i = m_block * kBlockM; i < row_end; ++i)
          for (int64_t j = int64_t(n) * kBlockN; j < int64_t(n + 1) * kBlockN; ++j)
            ASSERT_TRUE(spec.visible(i, j)) << "unmasked tile " << n << " hides row " << i << " col " << j
                                            << " sq " << sq << " sk " << sk << " diag " << spec.diag;
      }
    }
  }
}

TEST(Sm90BlockMask, TileRangesMatchMaskSpec) {
  check_block_masks<128, 128>(1);  // D = 128 under a mask
  check_block_masks<128, 64>(2);   // D = 256
  check_block_masks<128, 176>(3);  // D = 128 without a mask
  check_block_masks<192, 192>(4);  // D = 64 without a mask (three consumer warpgroups)
  check_block_masks<192, 128>(5);  // D = 64 under a mask
}

// The backward walks, for each KV tile, the Q tiles visible_query_tiles() returns; in
// deterministic mode KV tile n adds into Q tile m's dQ once n - first_key_tile(m) earlier KV tiles
// have. So for every Q tile the KV tiles that visit it (and exist: n * block_n < Sk) must be
// exactly [first_key_tile(m), first_key_tile(m) + count): a gap or a wrong start would leave a
// block waiting forever. Also every visible (row, column) pair must be visited.
void check_backward_tile_order(int block_m, int block_n, uint32_t seed) {
  std::mt19937 gen(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const auto [sq, sk, spec] = random_mask_case(gen, 900, 400);
    const int m_tiles = static_cast<int>((sq + block_m - 1) / block_m);
    const int n_tiles = static_cast<int>((sk + block_n - 1) / block_n);
    std::vector<std::vector<int>> visitors(m_tiles);
    for (int n = 0; n < n_tiles; ++n) {
      const int n0 = n * block_n;
      const cuda::TileRange r = cuda::visible_query_tiles(spec, n0, n0 + block_n, static_cast<int>(sq), block_m);
      for (int m = r.begin; m < r.end && !r.empty(); ++m) visitors[m].push_back(n);
      for (int64_t j = n0; j < std::min<int64_t>(n0 + block_n, sk); ++j)
        for (int64_t i = 0; i < sq; ++i)
          if (spec.visible(i, j))
            ASSERT_TRUE(!r.empty() && i / block_m >= r.begin && i / block_m < r.end)
                << "row " << i << " col " << j << " not visited; sq " << sq << " sk " << sk << " diag "
                << spec.diag << " window (" << spec.left << ", " << spec.right << ")";
    }
    for (int m = 0; m < m_tiles; ++m) {
      const int first = cuda::first_key_tile(spec, m * block_m, block_n);
      for (std::size_t t = 0; t < visitors[m].size(); ++t)
        ASSERT_EQ(visitors[m][t], first + static_cast<int>(t))
            << "Q tile " << m << ": visitor " << t << " of " << visitors[m].size() << "; sq " << sq << " sk "
            << sk << " diag " << spec.diag << " window (" << spec.left << ", " << spec.right << ")";
    }
  }
}

TEST(BackwardTileOrder, VisitorsOfEachQTileAreContiguousFromFirstKeyTile) {
  check_backward_tile_order(64, 128, 3);   // sm80 D <= 128, sm90 D = 128
  check_backward_tile_order(128, 128, 4);  // sm90 D = 64
  check_backward_tile_order(64, 64, 5);    // sm80 D > 128
  check_backward_tile_order(64, 80, 6);    // sm90 D = 256, 80-key tiles
}

// The deterministic grid as the hardware runs it: `heads` heads (Sq = sq, Sk = spec's) one after
// another, each head's key tiles in dq_launch_key_tile's order (ascending when `ascending`, the
// order before it, for comparison), a block starting whenever one of `sms` slots is free (one
// block per SM, as the sm90 backward), and each tick every running block whose next visit has its
// turn taking it. Returns the ticks to finish, and with `wait` false the
// ticks of the same launch order if no block ever waited (the default mode's bound).
int simulate_dq_launch(const MaskSpec& spec, int sq, int block_m, int block_n, int heads, int sms, bool rotated,
                       bool wait, bool ascending = false) {
  const int n_tiles = static_cast<int>((spec.seqlen_k + block_n - 1) / block_n), m_tiles = (sq + block_m - 1) / block_m;
  struct Block {
    int head, n;
    std::vector<int> walk;
    std::size_t pos = 0;
  };
  std::vector<Block> queue;
  for (int h = 0; h < heads; ++h) {
    for (int x = 0; x < n_tiles; ++x) {
      Block blk{h, ascending ? x : cuda::dq_launch_key_tile(rotated, n_tiles, x), {}};
      const cuda::TileRange r = cuda::visible_query_tiles(spec, blk.n * block_n, (blk.n + 1) * block_n, sq, block_m);
      const int offset = cuda::dq_walk_offset(rotated, blk.n, r, block_m, block_n);
      for (int step = 0; step < r.end - r.begin; ++step) blk.walk.push_back(cuda::dq_walk_tile(r, offset, step));
      if (!blk.walk.empty()) queue.push_back(std::move(blk));
    }
  }
  std::vector<int> sema(static_cast<std::size_t>(heads) * m_tiles, 0);
  std::vector<Block> running;
  std::size_t next = 0;
  int ticks = 0;
  while (next < queue.size() || !running.empty()) {
    while (static_cast<int>(running.size()) < sms && next < queue.size()) running.push_back(queue[next++]);
    std::vector<std::size_t> moved;
    for (std::size_t i = 0; i < running.size(); ++i) {
      const Block& blk = running[i];
      const int m = blk.walk[blk.pos];
      const int m_end = std::min((m + 1) * block_m, sq);
      if (!wait || cuda::dq_turn(spec, rotated, blk.n, m * block_m, m_end, block_n) == sema[blk.head * m_tiles + m])
        moved.push_back(i);
    }
    if (moved.empty()) {
      ADD_FAILURE() << "deadlock at tick " << ticks << "; sq " << sq << " sk " << spec.seqlen_k << " rotated "
                    << rotated;
      return -1;
    }
    for (std::size_t i : moved) ++sema[running[i].head * m_tiles + running[i].walk[running[i].pos++]];
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [](const Block& blk) { return blk.pos == blk.walk.size(); }),
                  running.end());
    ++ticks;
  }
  return ticks;
}

// The deterministic dQ schedules of tile_range.h, with every key tile's block resident at once:
// at each query tile the turns of its visitors are exactly 0 .. count-1 (a gap or a repeat would
// hang a block or break the order), and a lock-step simulation (each tick, every block whose
// next visit has its turn takes it: simulate_dq_launch) finishes. Returns the simulation's ticks and
// the longest walk.
struct ScheduleRun {
  int ticks = 0;
  int longest_walk = 0;
};
ScheduleRun simulate_dq_schedule(const MaskSpec& spec, int64_t sq, int block_m, int block_n, bool rotated) {
  const int m_tiles = static_cast<int>((sq + block_m - 1) / block_m);
  const int n_tiles = static_cast<int>((spec.seqlen_k + block_n - 1) / block_n);
  std::vector<std::vector<int>> turns(m_tiles);
  ScheduleRun run;
  for (int n = 0; n < n_tiles; ++n) {
    const cuda::TileRange r = cuda::visible_query_tiles(spec, n * block_n, (n + 1) * block_n, static_cast<int>(sq), block_m);
    if (r.empty()) continue;
    const int offset = cuda::dq_walk_offset(rotated, n, r, block_m, block_n);
    // The sm90 kernel steps through its walk with dq_walk_next: over three query heads it must
    // visit what dq_walk_tile gives, head after head.
    const int count = r.end - r.begin;
    cuda::DqWalkPos at{0, r.begin + offset};
    for (int step = 0; step < 3 * count; ++step) {
      const bool same = at.head == step / count && at.m_block == cuda::dq_walk_tile(r, offset, step % count);
      EXPECT_TRUE(same) << "step " << step << " of a walk of " << count << ": dq_walk_next gives (" << at.head
                        << ", " << at.m_block << ")";
      if (!same) break;
      at = cuda::dq_walk_next(r, r.begin + offset, at);
    }
    for (int step = 0; step < count; ++step) {
      const int m = cuda::dq_walk_tile(r, offset, step);
      const int m_end = static_cast<int>(std::min<int64_t>((m + 1) * int64_t{block_m}, sq));
      turns[m].push_back(cuda::dq_turn(spec, rotated, n, m * block_m, m_end, block_n));
    }
    run.longest_walk = std::max(run.longest_walk, r.end - r.begin);
  }
  for (int m = 0; m < m_tiles; ++m) {
    std::vector<int> sorted = turns[m];
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t t = 0; t < sorted.size(); ++t)
      EXPECT_EQ(sorted[t], static_cast<int>(t)) << "Q tile " << m << " of " << m_tiles << ": turns are not 0.."
                                                << sorted.size() - 1 << "; sq " << sq << " rotated " << rotated;
  }
  // Every key tile's block resident at once: as many slots as tiles.
  run.ticks = simulate_dq_launch(spec, static_cast<int>(sq), block_m, block_n, 1, n_tiles, rotated, true);
  return run;
}

void check_dq_schedules(int block_m, int block_n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> len(1, 3000), coin(0, 1);
  for (int trial = 0; trial < 60; ++trial) {
    // Rotated: self-attention, causal (either alignment is the main diagonal) or not.
    const int64_t s = len(gen);
    const MaskSpec spec{0, -1, coin(gen) == 1 ? 0 : -1, s};
    ASSERT_TRUE(cuda::rotated_dq_order_applies(spec, s));
    const ScheduleRun rotated = simulate_dq_schedule(spec, s, block_m, block_n, true);
    EXPECT_LE(rotated.ticks, rotated.longest_walk) << "rotated schedule waited; S " << s << " causal " << spec.right;
    // Wavefront: any mask, including the ones the rotated schedule refuses.
    const auto [sq, sk, any] = random_mask_case(gen, 1500, 400);
    simulate_dq_schedule(any, sq, block_m, block_n, false);
    if (!cuda::rotated_dq_order_applies(any, sq)) continue;
    simulate_dq_schedule(any, sq, block_m, block_n, true);
  }
  EXPECT_FALSE(cuda::rotated_dq_order_applies(MaskSpec{0, 5, -1, 100}, 100));  // a left window
  EXPECT_FALSE(cuda::rotated_dq_order_applies(MaskSpec{0, -1, -1, 100}, 90));  // Sq != Sk
  EXPECT_FALSE(cuda::rotated_dq_order_applies(MaskSpec{0, -1, 3, 100}, 100));  // a right window
}

// On the H200 (132 SMs) the rotated walk with the key tiles launched in ascending order ran the
// deterministic backward of D 64, S 16k, causal at 0.53x the default (run 14's grid); this model
// puts that order at 0.51x of its no-wait bound. dq_launch_key_tile's order must stay near it.
TEST(BackwardTileOrder, RotatedLaunchOrderKeepsTheGridBusy) {
  struct Case {
    int64_t s;
    int block_m, heads;
    bool causal;
    double min_ratio;
  };
  for (const Case& c : {Case{16384, 128, 32, true, 0.95}, Case{8192, 128, 64, true, 0.95},
                        Case{16384, 128, 32, false, 0.99}, Case{8192, 64, 32, true, 0.95}}) {
    const MaskSpec spec{0, -1, c.causal ? 0 : -1, c.s};
    ASSERT_TRUE(cuda::rotated_dq_order_applies(spec, c.s));
    const int s = static_cast<int>(c.s);
    const int bound = simulate_dq_launch(spec, s, c.block_m, 128, c.heads, 132, true, false);
    const int ticks = simulate_dq_launch(spec, s, c.block_m, 128, c.heads, 132, true, true);
    const int bound_asc = simulate_dq_launch(spec, s, c.block_m, 128, c.heads, 132, true, false, true);
    const int ticks_asc = simulate_dq_launch(spec, s, c.block_m, 128, c.heads, 132, true, true, true);
    std::printf("  S %lld, %d x 128 tiles, %d heads, causal %d: no-wait bound over ticks %.2f (ascending order: %.2f)\n",
                static_cast<long long>(c.s), c.block_m, c.heads, c.causal ? 1 : 0, static_cast<double>(bound) / ticks,
                static_cast<double>(bound_asc) / ticks_asc);
    EXPECT_GE(static_cast<double>(bound) / ticks, c.min_ratio)
        << "S " << c.s << " block_m " << c.block_m << " causal " << c.causal << ": " << ticks << " ticks, "
        << bound << " without waits";
  }
}

TEST(BackwardTileOrder, DeterministicSchedulesAreCompleteAndFinish) {
  check_dq_schedules(64, 128, 6);   // sm90 D = 128
  check_dq_schedules(128, 128, 7);  // sm90 D = 64
  check_dq_schedules(64, 64, 8);    // sm80 D > 128 (sm80 D <= 128 is 64 x 128, as sm90 D = 128)
  check_dq_schedules(64, 80, 9);    // sm90 D = 256, 80-key tiles (bwd_wide_kernel_sm90.h)
}

// Without a causal mask the rotated walk needs a head's key tiles resident together; where they
// fill the slots badly it is slower than the wavefront (rotated_dq_walk_packs decides). In the
// lock-step model, at the tiles of the sm90 kernels and slot counts of an H100 / H200 (132) and
// an A100 (108), the schedule it picks is within 0.03 of the better one's share of the no-wait
// bound.
TEST(BackwardTileOrder, RotatedWalkTakenWhereItPacks) {
  for (const auto [block_m, block_n] : {std::pair{64, 80}, std::pair{64, 128}}) {
    for (int sms : {132, 108}) {
      for (int64_t s : {2048, 4096, 8192, 16384}) {
        const MaskSpec spec{0, -1, -1, s};
        const int n_blocks = static_cast<int>((s + block_n - 1) / block_n);
        if (n_blocks > sms) continue;
        const int heads = static_cast<int>(131072 / s);
        const auto share = [&](bool rotated) {
          const int bound = simulate_dq_launch(spec, static_cast<int>(s), block_m, block_n, heads, sms, rotated, false);
          return static_cast<double>(bound) / simulate_dq_launch(spec, static_cast<int>(s), block_m, block_n, heads, sms,
                                                                   rotated, true);
        };
        const double rotated = share(true), wavefront = share(false);
        const bool packs = cuda::rotated_dq_walk_packs(n_blocks, sms);
        std::printf("  %d x %d tiles, S %lld, %d slots: rotated %.2f, wavefront %.2f; takes %s\n", block_m, block_n,
                    static_cast<long long>(s), sms, rotated, wavefront, packs ? "rotated" : "wavefront");
        EXPECT_GE(packs ? rotated : wavefront, std::max(rotated, wavefront) - 0.03)
            << block_m << " x " << block_n << ", S " << s << ", " << sms << " slots";
      }
    }
  }
}

// Causal self-attention with key tiles at least as tall as Q tiles: the rotated walk never wraps and every
// wait points to a higher key tile (at each Q tile a key tile's turn counts the visitors above it),
// so launched in descending order it finishes however few blocks are resident, which lets the sm90
// launcher rotate it without the co-residency test (dq_schedule.h). sm90 D 256's grid at S 16k
// (256 key tiles of 64 a head, 132 SMs) is the case: the model's ratios over the no-wait bound
// are printed for it, rotated and wavefront.
TEST(BackwardTileOrder, RotatedCausalWalkNeedsNoCoResidency) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int64_t> len(1, 2500);
  for (const auto [block_m, block_n] : {std::pair{64, 128}, std::pair{128, 128}, std::pair{64, 64}, std::pair{64, 80}}) {
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t s = len(gen);
      const MaskSpec spec{0, -1, 0, s};
      ASSERT_TRUE(cuda::rotated_dq_order_applies(spec, s));
      ASSERT_TRUE(cuda::rotated_dq_waits_point_up(spec, block_m, block_n));
      const int n_tiles = static_cast<int>((s + block_n - 1) / block_n);
      for (int n = 0; n < n_tiles; ++n) {
        const cuda::TileRange r = cuda::visible_query_tiles(spec, n * block_n, (n + 1) * block_n, static_cast<int>(s), block_m);
        EXPECT_EQ(cuda::dq_walk_offset(true, n, r, block_m, block_n), 0) << "key tile " << n << " wraps; S " << s;
        for (int m = r.begin; m < r.end; ++m) {
          const int m_end = static_cast<int>(std::min<int64_t>((m + 1) * int64_t{block_m}, s));
          const cuda::TileRange keys = cuda::visible_key_tiles(spec, m * block_m, m_end, block_n);
          EXPECT_EQ(cuda::dq_turn(spec, true, n, m * block_m, m_end, block_n), keys.end - 1 - n)
              << "key tile " << n << " at Q tile " << m << " waits for a lower tile; S " << s << ", " << block_m << " x "
              << block_n;
        }
      }
      for (int sms : {1, 2, 5}) {  // fails on a hang (simulate_dq_launch)
        EXPECT_GT(simulate_dq_launch(spec, static_cast<int>(s), block_m, block_n, 3, sms, true, true), 0)
            << "S " << s << ", " << sms << " slots";
      }
    }
  }
  EXPECT_FALSE(cuda::rotated_dq_waits_point_up(MaskSpec{0, -1, -1, 100}, 64, 128));  // no causal mask: wraps
  EXPECT_FALSE(cuda::rotated_dq_waits_point_up(MaskSpec{0, -1, 0, 1000}, 128, 64));  // Q tiles wider than key tiles
  EXPECT_FALSE(cuda::rotated_dq_waits_point_up(MaskSpec{0, 5, 0, 100}, 64, 64));     // a left window
  const MaskSpec d256{0, -1, 0, 16384};
  const double rotated = static_cast<double>(simulate_dq_launch(d256, 16384, 64, 64, 8, 132, true, false)) /
                         simulate_dq_launch(d256, 16384, 64, 64, 8, 132, true, true);
  const double wavefront = static_cast<double>(simulate_dq_launch(d256, 16384, 64, 64, 8, 132, false, false)) /
                           simulate_dq_launch(d256, 16384, 64, 64, 8, 132, false, true);
  std::printf("  D 256 causal S 16k, 8 heads, 132 SMs: no-wait bound over ticks, rotated %.2f, wavefront %.2f\n",
              rotated, wavefront);
  EXPECT_GE(rotated, 0.95);
}

}  // namespace
}  // namespace flashtrain::testing

#ifdef FLASHTRAIN_WITH_CUDA
#include <string>

#include <cuda_runtime.h>

#include "api/validate.h"
#include "cuda/sm90/launch.h"
#include "test_util.h"

namespace flashtrain::testing {
namespace {

// A problem over host tensors: refusal()'s feature rules do not need a device.
Problem host_problem(const AttentionOptions& options, int64_t dim_qk = 128, int64_t dim_v = 128) {
  static float dummy[1];
  auto view = [](int64_t d) { return TensorView::contiguous(dummy, DType::kBFloat16, {1, 4, 2, d}); };
  Problem p = make_input_problem(view(dim_qk), view(dim_qk), view(dim_v), options);
  return p;
}

TEST(Sm90Refusal, NamesEachUnsupportedFeature) {
  AttentionOptions dropout;
  dropout.dropout_p = 0.1;
  EXPECT_NE(cuda::sm90::refusal(host_problem(dropout)).find("sm90: dropout"), std::string::npos);
  AttentionOptions softcap;
  softcap.softcap = 30.0;
  EXPECT_NE(cuda::sm90::refusal(host_problem(softcap)).find("sm90: softcap (30)"), std::string::npos);
  const std::string dims = cuda::sm90::refusal(host_problem({}, 192, 128));
  EXPECT_NE(dims.find("Dv (128) != Dqk (192)"), std::string::npos) << dims;
  EXPECT_NE(dims.find("head dim 192 not supported"), std::string::npos) << dims;
  EXPECT_NE(cuda::sm90::refusal(host_problem({})).find("sm90: tensors are on cpu"), std::string::npos);
}

TEST(Sm90Refusal, BackwardNamesEachUnsupportedFeature) {
  AttentionOptions dropout;
  dropout.dropout_p = 0.1;
  EXPECT_NE(cuda::sm90::bwd_refusal(host_problem(dropout)).find("dropout (p = 0.1) not supported in backward"),
            std::string::npos);
  AttentionOptions softcap;
  softcap.softcap = 30.0;
  EXPECT_NE(cuda::sm90::bwd_refusal(host_problem(softcap)).find("softcap (30) not supported in backward"),
            std::string::npos);
  const std::string d96 = cuda::sm90::bwd_refusal(host_problem({}, 96, 96));
  EXPECT_NE(d96.find("head dim 96 not supported in backward (64, 128, 256 are)"), std::string::npos) << d96;
  EXPECT_EQ(cuda::sm90::bwd_refusal(host_problem({}, 256, 256)).find("head dim 256 not supported"), std::string::npos);
  EXPECT_NE(cuda::sm90::bwd_refusal(host_problem({})).find("sm90: tensors are on cpu"), std::string::npos);
}

struct Sm90Case {
  const char* name;
  int64_t batch, sq, sk, hq, hk, d;
  DType dtype;
  bool causal;
  CausalAlign align;
  int64_t left, right;
  const char* key_tile = nullptr;  // FLASHTRAIN_FWD_KEY_TILE for this case (unset: the default choice)
};

// Sets FLASHTRAIN_FWD_KEY_TILE for one scope (nullptr: unset).
class KeyTileEnv : public ScopedEnv {
 public:
  explicit KeyTileEnv(const char* value) : ScopedEnv("FLASHTRAIN_FWD_KEY_TILE", value) {}
};

class Sm90Forward : public ::testing::TestWithParam<Sm90Case> {};

TEST_P(Sm90Forward, MatchesReference) {
  if (!hopper_present()) GTEST_SKIP() << "no compute capability 9.0 device";
  const Sm90Case& t = GetParam();
  check::CaseSpec spec = dense_spec(t.name, t.batch, t.sq, t.sk, t.hq, t.hk, t.d, t.d, t.dtype);
  spec.backward = false;
  spec.options.causal = t.causal;
  spec.options.align = t.align;
  spec.options.window_left = t.left;
  spec.options.window_right = t.right;
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(spec, Backend::kCUDA);  // before the reference's seconds
  check::Case c(spec);
  const check::Outputs ref = c.run(Backend::kReference);
  const check::Outputs naive = c.run_naive();
  const check::Case::Views v = c.prepare(Backend::kCUDA);
  const Problem p = make_forward_problem(v.q, v.k, v.v, v.out, v.lse, v.options);
  const std::string why = cuda::sm90::refusal(p);
  ASSERT_TRUE(why.empty()) << why;
  {
    const KeyTileEnv env(t.key_tile);
    cuda::sm90::run_fwd(p, nullptr);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const check::Outputs got = c.collect(Backend::kCUDA);
  const check::Comparison out = check::compare("out", spec.dtype, got.out, ref.out, naive.out);
  const check::Comparison lse = check::compare("lse", DType::kFloat32, got.lse, ref.lse, naive.lse);
  EXPECT_TRUE(out.pass) << out.describe();
  EXPECT_TRUE(lse.pass) << lse.describe();
  EXPECT_EQ(got.writes_outside, 0);
}

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kFp16 = DType::kFloat16;
constexpr CausalAlign kBR = CausalAlign::kBottomRight;
constexpr CausalAlign kTL = CausalAlign::kTopLeft;

INSTANTIATE_TEST_SUITE_P(
    Shapes, Sm90Forward,
    ::testing::Values(Sm90Case{"d128_ragged", 2, 1000, 1000, 4, 4, 128, kBf16, false, kBR, -1, -1},
                      Sm90Case{"d128_causal_br_gqa", 1, 257, 1031, 6, 2, 128, kFp16, true, kBR, -1, -1},
                      Sm90Case{"d128_causal_br_empty_rows", 1, 1031, 257, 4, 1, 128, kBf16, true, kBR, -1, -1},
                      Sm90Case{"d128_causal_tl", 2, 300, 700, 2, 2, 128, kBf16, true, kTL, -1, -1},
                      Sm90Case{"d128_window", 1, 900, 900, 2, 2, 128, kFp16, true, kBR, 100, 0},
                      Sm90Case{"d64_window", 1, 513, 513, 4, 4, 64, kBf16, false, kBR, 64, 32},
                      Sm90Case{"d64_sq1", 3, 1, 4097, 2, 2, 64, kFp16, true, kBR, -1, -1},
                      // rows that see no key: out 0, lse -inf
                      Sm90Case{"d64_causal_br_empty_rows", 1, 1031, 257, 4, 1, 64, kFp16, true, kBR, -1, -1},
                      Sm90Case{"d256_causal_gqa", 1, 333, 555, 4, 2, 256, kBf16, true, kBR, -1, -1},
                      Sm90Case{"d256_tl", 1, 400, 191, 2, 1, 256, kFp16, true, kTL, -1, -1},
                      // more work tiles than SMs: several tiles per persistent block
                      Sm90Case{"many_tiles_d128_empty_tiles", 3, 1031, 257, 16, 4, 128, kBf16, true, kBR, -1, -1},
                      Sm90Case{"many_tiles_d256", 2, 400, 400, 40, 20, 256, kFp16, false, kBR, -1, -1},
                      // without a mask, D = 128 runs 176-key tiles from Sk 8192 (forced here for
                      // shorter Sk): one ragged tile, many work tiles (O staged in Q's buffer) over
                      // a K length no tile size divides, and the choice by length
                      Sm90Case{"d128_one_ragged_176_tile", 1, 300, 150, 2, 2, 128, kBf16, false, kBR, -1, -1, "long"},
                      Sm90Case{"many_tiles_d128_gqa_176", 2, 700, 1500, 48, 8, 128, kFp16, false, kBR, -1, -1, "long"},
                      Sm90Case{"d128_long_keys", 1, 300, 8300, 2, 2, 128, kBf16, false, kBR, -1, -1},
                      Sm90Case{"d128_long_keys_forced_128", 1, 200, 8200, 2, 1, 128, kFp16, false, kBR, -1, -1, "128"},
                      // D = 64 has no long tile: "long" keeps its 128-key tiles
                      Sm90Case{"d64_one_ragged_tile_long_ignored", 1, 300, 100, 2, 2, 64, kFp16, false, kBR, -1, -1, "long"},
                      Sm90Case{"many_tiles_d64_gqa", 2, 700, 1500, 48, 8, 64, kBf16, false, kBR, -1, -1},
                      Sm90Case{"d64_long_keys", 1, 300, 2100, 2, 2, 64, kBf16, false, kBR, -1, -1},
                      // D = 64 runs 192-row query blocks (three consumer warpgroups): ragged last
                      // blocks, causal blocks claimed dynamically, many tiles per persistent block
                      Sm90Case{"many_tiles_d64_causal_192_rows", 2, 1000, 1000, 24, 8, 64, kBf16, true, kBR, -1, -1},
                      Sm90Case{"many_tiles_d64_192_rows", 3, 450, 700, 40, 40, 64, kFp16, false, kBR, -1, -1},
                      Sm90Case{"d64_192_rows_causal_tl", 1, 577, 385, 2, 2, 64, kBf16, true, kTL, -1, -1}),
    [](const ::testing::TestParamInfo<Sm90Case>& info) { return std::string(info.param.name); });

TEST(Sm90ForwardKeyTile, BadOverrideRaisesNamingIt) {
  if (!hopper_present()) GTEST_SKIP() << "no compute capability 9.0 device";
  check::CaseSpec spec = dense_spec("bad_env", 1, 64, 64, 1, 1, 128, 128, kBf16);
  spec.backward = false;
  check::Case c(spec);
  const check::Case::Views v = c.prepare(Backend::kCUDA);
  const Problem p = make_forward_problem(v.q, v.k, v.v, v.out, v.lse, v.options);
  const KeyTileEnv env("160");
  try {
    cuda::sm90::run_fwd(p, nullptr);
    FAIL() << "FLASHTRAIN_FWD_KEY_TILE=160 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLASHTRAIN_FWD_KEY_TILE='160'"), std::string::npos) << e.what();
  }
}

// Causal-style forwards claim their work tiles from a counter per stream, which each launch
// leaves at zero (fwd_tile_scheduler_sm90.h). Forwards on two streams at once, eight times each,
// their outputs zeroed on the stream before every launch: a shared counter, or one left non-zero,
// would skip or repeat tiles, leaving zeros. Every launch must write every tile, bit for bit the
// single-stream result.
TEST(Sm90ForwardDynamicTiles, ConcurrentStreamsWriteEveryTile) {
  if (!hopper_present()) GTEST_SKIP() << "no compute capability 9.0 device";
  // 9 query blocks x 16 heads x 2 batches = 288 work tiles, more than an H100 / H200 has SMs.
  check::CaseSpec spec = dense_spec("dynamic tiles, 2 x 1031, 16 / 4 heads", 2, 1031, 1031, 16, 4, 64, 64, kBf16);
  spec.backward = false;
  spec.options.causal = true;
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(spec, Backend::kCUDA);
  check::Case single(spec);
  const check::Outputs expected = single.run(Backend::kCUDA);
  check::Case case_a(spec), case_b(spec);
  const check::Case::Views va = case_a.prepare(Backend::kCUDA);
  const check::Case::Views vb = case_b.prepare(Backend::kCUDA);
  const Problem pa = make_forward_problem(va.q, va.k, va.v, va.out, va.lse, va.options);
  const Problem pb = make_forward_problem(vb.q, vb.k, vb.v, vb.out, vb.lse, vb.options);
  cudaStream_t sa = nullptr, sb = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = static_cast<size_t>(va.out.numel()) * 2;  // bf16, dense
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(cudaMemsetAsync(va.out.data, 0, bytes, sa), cudaSuccess);
    cuda::sm90::run_fwd(pa, sa);
    ASSERT_EQ(cudaMemsetAsync(vb.out.data, 0, bytes, sb), cudaSuccess);
    cuda::sm90::run_fwd(pb, sb);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(sa);
  cudaStreamDestroy(sb);
  const check::Outputs got_a = case_a.collect(Backend::kCUDA);
  const check::Outputs got_b = case_b.collect(Backend::kCUDA);
  EXPECT_TRUE(got_a.out == expected.out) << "stream a: out differs from the single-stream run";
  EXPECT_TRUE(got_b.out == expected.out) << "stream b: out differs from the single-stream run";
  EXPECT_TRUE(got_a.lse == expected.lse) << "stream a: lse differs from the single-stream run";
  EXPECT_TRUE(got_b.lse == expected.lse) << "stream b: lse differs from the single-stream run";
}

}  // namespace
}  // namespace flashtrain::testing
#endif  // FLASHTRAIN_WITH_CUDA
