// The tile-level questions of the main loops, on the host and the device: which key (query) tiles
// a query (key) tile can see at all, and where the deterministic dQ order starts. Free of CuTe so
// CPU-only builds test them against MaskSpec (tests/cpp/test_sm90_fwd.cpp).
#pragma once
#include <cstdint>

#include "../../common/host_device.h"
#include "../../common/mask.h"

namespace flashtrain::cuda {

// Key tiles [begin, end) (in units of block_n columns) that query rows [row_begin, row_end) can
// see; begin >= end when none. col_begin/col_end are non-decreasing in the row, so the first
// row bounds the start and the last row bounds the end.
struct TileRange {
  int begin;
  int end;
  FT_HOST_DEVICE bool empty() const { return begin >= end; }
};

FT_HOST_DEVICE TileRange visible_key_tiles(const MaskSpec& mask, int row_begin, int row_end,
                                                       int block_n) {
  const int64_t col_begin = mask.col_begin(row_begin);
  const int64_t col_end = mask.col_end(row_end - 1);
  if (col_begin >= col_end) return {0, 0};
  return {static_cast<int>(col_begin / block_n), static_cast<int>((col_end + block_n - 1) / block_n)};
}

// Query tiles [begin, end) (units of block_m rows) that see any of key columns
// [col_begin, col_end), for kernels that iterate over queries inside a key tile. Rows are
// limited to [0, seqlen_q).
FT_HOST_DEVICE TileRange visible_query_tiles(const MaskSpec& mask, int col_begin, int col_end,
                                                         int seqlen_q, int block_m) {
  // Row i sees column j iff j - diag - right <= i (right >= 0) and i <= j - diag + left (left >= 0).
  int64_t first = 0, last = seqlen_q - 1;
  if (mask.right >= 0 && col_begin - mask.diag - mask.right > first) first = col_begin - mask.diag - mask.right;
  if (mask.left >= 0 && col_end - 1 - mask.diag + mask.left < last) last = col_end - 1 - mask.diag + mask.left;
  if (col_begin >= mask.seqlen_k || first > last) return {0, 0};
  return {static_cast<int>(first / block_m), static_cast<int>(last / block_m + 1)};
}

// Inverse of visible_query_tiles over key tiles: the first key tile (units of block_n) that
// reaches the query tile starting at row m0. The key tiles reaching a query tile are contiguous,
// so this is where the deterministic order of the backward's dQ additions starts.
FT_HOST_DEVICE int first_key_tile(const MaskSpec& mask, int m0, int block_n) {
  if (mask.left < 0) return 0;
  const int64_t a = m0 + mask.diag - mask.left;
  const int64_t n = a >= 0 ? a / block_n : -((-a + block_n - 1) / block_n);  // floor division
  return n < 0 ? 0 : static_cast<int>(n);
}

// ---- the order of the deterministic backward's dQ additions -----------------------------------
// Every key tile adds its share of a query tile's dQ in a fixed turn (a semaphore per query tile
// counts the turns taken). Two schedules:
//  - wavefront (any mask): turns ascend with the key tile from first_key_tile(), and every key tile
//    walks its query tiles in ascending order. All blocks start on the same query tile and each
//    waits for the one before it, so a head's last key tile starts about as many steps late as
//    there are key tiles (measured: 0.46x of the default speed under a causal mask, 0.76x without).
//    Every wait points to a lower key tile, that is an earlier block, so it can never hang.
//  - rotated (equal lengths, no left window, causal on the main diagonal or no causal mask): key
//    tile n starts its walk on its diagonal query tile (n * block_n / block_m) and wraps around; at
//    query tile m the turns count down from m's diagonal key tile, wrapping. In lock step no block
//    ever waits: the visit before yours at a query tile is key tile n + 1's, made block_n / block_m
//    steps earlier. Its waits point to higher key tiles, wrapping around, so all key tiles of one
//    (batch, head group) must be resident together: the host takes it only when the grid's key
//    tiles fit on the device at once (dq_schedule.h), or, launched in descending order, when no
//    wait wraps (rotated_dq_waits_point_up: causal); otherwise the wavefront. Measured on the H200 (bench/RESULTS.md,
//    run 6, sm90 D 64/128): 0.73-0.93x of the default speed, causal or not.
// tests/cpp/test_sm90_fwd.cpp checks both on the CPU: each query tile's turns are a permutation,
// and a lock-step simulation finishes (in the walk length, for the rotated schedule).

// Whether the rotated schedule is valid for one sequence's mask.
FT_HOST_DEVICE bool rotated_dq_order_applies(const MaskSpec& mask, int64_t seqlen_q) {
  return mask.left < 0 && seqlen_q == mask.seqlen_k && (mask.right < 0 || (mask.right == 0 && mask.diag == 0));
}

// Whether every wait of the rotated walk points to a higher key tile: causal self-attention on the
// main diagonal with key tiles at least as tall as Q tiles, where key tile n's walk starts on the Q tile
// holding row n * block_n (its first visible one, so it never wraps) and at each Q tile waits only
// for the key tiles between it and that tile's diagonal. Launched in descending key-tile order
// (dq_launch_key_tile), each wait then points to an earlier block, so, like the wavefront, the
// walk can never hang, however few of a head's key tiles are resident at once.
FT_HOST_DEVICE bool rotated_dq_waits_point_up(const MaskSpec& mask, int block_m, int block_n) {
  return mask.left < 0 && mask.right == 0 && mask.diag == 0 && block_m > 0 && block_n >= block_m;
}

// Whether the rotated walk, where its waits wrap (no causal mask), keeps `resident` block slots
// busy with n_blocks key tiles a head (n_blocks <= resident): its waits hold each head's tiles in
// lock step, so the tiles of a head that is only partly resident stall until the rest start. When
// whole heads fill less than 85% of the slots the wavefront, whose waits are one-sided, does as
// well or better: a threshold fitted to the lock-step model of tests/cpp/test_sm90_fwd.cpp
// (RotatedWalkTakenWhereItPacks), e.g. D 256's 80-key tiles at S 8k on 132 slots: 103 tiles a
// head fill 78%, rotated 0.82 of the no-wait bound, wavefront 0.95 (measured on an H100, run 37:
// 0.86x the pair kernel, whose 128 tiles a head fill 97%).
FT_HOST_DEVICE bool rotated_dq_walk_packs(int n_blocks, int resident) {
  return n_blocks > 0 && n_blocks <= resident && 20 * (resident / n_blocks) * n_blocks >= 17 * resident;
}

// Where key tile n_block's walk over its query tiles `m_tiles` starts, as an offset into them.
FT_HOST_DEVICE int dq_walk_offset(bool rotated, int n_block, TileRange m_tiles, int block_m, int block_n) {
  if (!rotated || m_tiles.empty()) return 0;
  int start = static_cast<int>(static_cast<int64_t>(n_block) * block_n / block_m);  // the diagonal query tile
  if (start < m_tiles.begin) start = m_tiles.begin;
  if (start > m_tiles.end - 1) start = m_tiles.end - 1;
  return start - m_tiles.begin;
}

// The query tile of step `step` (in [0, count)) of a walk over m_tiles starting at `offset`.
FT_HOST_DEVICE int dq_walk_tile(TileRange m_tiles, int offset, int step) {
  const int count = m_tiles.end - m_tiles.begin;
  int j = offset + step;
  if (j >= count) j -= count;
  return m_tiles.begin + j;
}

// The key tile of the block launched x-th among a head's n_blocks (blockIdx.x of the head-adjacent
// grid). Under the rotated walk a key tile waits at each Q tile for the tiles after it (up to its
// wrap), so they are launched first: with the heads one after another, later heads start tile by
// tile as SMs free up, and in ascending order each of their tiles would wait for one launched after
// it. A lock-step model of 132 SMs (tests/cpp/test_sm90_fwd.cpp, RotatedLaunchOrderKeepsTheGridBusy)
// puts the ascending order at 0.51x / 0.76x of its no-wait bound for D 64, S 16k / 8k, causal
// (the H200 measured deterministic over default 0.53x / 0.75x, run 14) and this one at 1.00x.
FT_HOST_DEVICE int dq_launch_key_tile(bool rotated, int n_blocks, int x) { return rotated ? n_blocks - 1 - x : x; }

// A block's place in its walk: query head and Q tile. It walks its Q tiles once per query head of
// its group, one head after another.
struct DqWalkPos {
  int head;
  int m_block;
};
// The place after `pos` in a walk over m_tiles that starts at Q tile `start` (m_tiles.begin plus
// dq_walk_offset): from step t's (head0 + t / count, dq_walk_tile(.., t % count)) step t + 1's,
// without a division.
FT_HOST_DEVICE DqWalkPos dq_walk_next(TileRange m_tiles, int start, DqWalkPos pos) {
  pos.m_block = pos.m_block + 1 == m_tiles.end ? m_tiles.begin : pos.m_block + 1;
  if (pos.m_block == start) ++pos.head;
  return pos;
}

// The turn of key tile n_block at the query tile of rows [m0, m_end) (m_end clipped to Sq).
FT_HOST_DEVICE int dq_turn(const MaskSpec& mask, bool rotated, int n_block, int m0, int m_end, int block_n) {
  if (!rotated) return n_block - first_key_tile(mask, m0, block_n);
  const TileRange keys = visible_key_tiles(mask, m0, m_end, block_n);  // begins at 0: no left window
  // The last key tile whose walk starts at or before this Q tile: the one holding its last row
  // (m0 / block_n when block_n is a multiple of the Q tile; with 80-key tiles over 64-row Q tiles,
  // m0 / block_n would put a tile that starts here after one that arrives a step later).
  int diagonal = (m_end - 1) / block_n;
  if (diagonal > keys.end - 1) diagonal = keys.end - 1;
  const int turn = diagonal - n_block;
  return turn < 0 ? turn + (keys.end - keys.begin) : turn;
}

}  // namespace flashtrain::cuda
