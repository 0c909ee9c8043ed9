// What every role of the sm90 backward main kernels (bwd_kernel_sm90.h, bwd_split_kernel_sm90.h,
// bwd_producer_sm90.h) shares: the kernel's parameters, the block's coordinates under the grid
// order, and the block's walk over (query head, Q tile) steps.
#pragma once
#include <cute/tensor.hpp>

#include "../../common/mask.h"
#include "../common/mask_tile.h"
#include "../sm80/bwd_params.h"

namespace flashtrain::cuda::sm90 {

template <class Traits>
struct BwdKernelParams {
  sm80::BwdParams p;
  typename Traits::TmaLoadQdO tma_q;
  typename Traits::TmaLoadQdO tma_do;
  typename Traits::TmaLoadKV tma_k;
  typename Traits::TmaLoadKV tma_v;
  typename Traits::TmaReducedQ tma_dq;
  typename Traits::ShapeQKV shape_q;
  typename Traits::ShapeQKV shape_k;
  typename Traits::ShapeQKV shape_dq;
  // Grid order (bwd_launch_template_sm90.h). band_heads == 0: a 3-D grid (key tile, batch, head),
  // the key tiles of a head adjacent (descending under the rotated dQ walk: dq_launch_key_tile).
  // band_heads > 0: a 1-D grid walking bands of band_heads (batch, head) units, each band key tile
  // by key tile: every unit's tile 0 of the band, then every tile 1, ... (cluster pairs: every
  // unit's tiles 0 and 1 side by side, then every unit's tiles 2 and 3, ...)
  int band_heads;
  int units;     // batch * heads per block row (the grid's y * z extent in the 3-D order)
  int n_blocks;  // key tiles per unit (cluster pairs: rounded up to even)
  uint64_t* trace;  // bwd_trace_sm90.h: a record per block, or nullptr (always, unless tracing)
};

// (key tile, batch, head unit) of this block under kp's grid order.
template <class Traits>
__device__ __forceinline__ void bwd_block_coords(const BwdKernelParams<Traits>& kp, int heads_z, int& n_block, int& b,
                                                 int& head_z) {
  if (kp.band_heads == 0) {
    n_block = dq_launch_key_tile(kp.p.dq_rotated, kp.n_blocks, static_cast<int>(blockIdx.x));
    b = static_cast<int>(blockIdx.y);
    head_z = static_cast<int>(blockIdx.z);
    return;
  }
  constexpr int kCluster = Traits::kClusterN;  // the blocks of a cluster: adjacent tiles of a unit
  const int lin = static_cast<int>(blockIdx.x);
  const int per_band = kp.band_heads * kp.n_blocks;
  const int band = lin / per_band;
  const int r = lin - band * per_band;
  const int first_unit = band * kp.band_heads;
  const int units_here = min(kp.band_heads, kp.units - first_unit);
  const int group = r / kCluster;  // (cluster of key tiles, unit), the unit fastest
  const int cluster = group / units_here;
  n_block = cluster * kCluster + (r - group * kCluster);
  const int unit = first_unit + (group - cluster * units_here);
  b = unit / heads_z;
  head_z = unit - b * heads_z;
}

// The block's steps: step t covers query head first.head + t / m_count and step t % m_count of
// the walk over the Q tiles m_tiles, which starts on the diagonal under the rotated deterministic
// schedule (tile_range.h). Every role follows the steps one by one (next), dividing by m_count
// nowhere.
struct BwdWalk {
  TileRange m_tiles;
  int start;  // the walk's first Q tile
  int num_steps;
  DqWalkPos first;
  __device__ DqWalkPos next(DqWalkPos pos) const { return dq_walk_next(m_tiles, start, pos); }
};

// The walk of key tile n_block (keys [n0, n0 + kBlockN)) over the kBlockM-row Q tiles that see it,
// for each query head of the block's chunk of its KV head's group, from hq_begin on. The key range
// is the whole tile, not clipped at len_k, so that first_key_tile() inverts it.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ BwdWalk make_bwd_walk(const sm80::BwdParams& p, const MaskSpec& mask, int len_q,
                                                 int n_block, int n0, int hq_begin) {
  BwdWalk walk;
  walk.m_tiles = visible_query_tiles(mask, n0, n0 + kBlockN, len_q, kBlockM);
  const int m_count = walk.m_tiles.empty() ? 0 : walk.m_tiles.end - walk.m_tiles.begin;
  walk.num_steps = m_count * p.heads_per_chunk;
  walk.start = walk.m_tiles.begin + dq_walk_offset(p.dq_rotated, n_block, walk.m_tiles, kBlockM, kBlockN);
  walk.first = DqWalkPos{hq_begin, walk.start};
  return walk;
}

}  // namespace flashtrain::cuda::sm90
