// Tile scheduler of the sm90 forward. Tile order: the query blocks of one head are consecutive, so
// the blocks running at the same time share their K/V in L2.
//
// Without a causal-style mask the grid has at most one block per SM and each block walks the
// work tiles (query block, head, batch) round-robin, so the producer loads the next
// tile's Q and K while the consumers finish the current one's epilogue. Those tiles cost the same.
//
// With a causal-style upper bound (window_right >= 0 and no left bound) later query blocks see
// more keys; they come first inside each head. A fixed round-robin cannot balance such tiles:
// tile t goes to block t mod #SMs, and with costs that repeat every #m-blocks the blocks' sums
// drift apart (simulated makespan over the mean, 132 SMs, 128-row tiles: 1.57 at S=16k B=1 H=16,
// 1.38 at S=1k B=16; as a greedy order, 1.01 and 1.07). So the blocks claim them greedily: with a
// claim counter (Params::counter) the grid again has one block per SM, each takes the tile after
// its current one from an atomic counter as soon as its producer has issued the current one's
// loads, and the producer hands the index to the consumers through shared memory (tile_full /
// tile_empty); the next tile's Q and K load during the current one's epilogue as in the
// persistent round-robin, where one block per tile (the form without a counter, which the
// hardware hands to SMs greedily) pays a block launch, a Q load and an epilogue in series per tile.
#pragma once
#include <cuda_runtime.h>

namespace flashtrain::cuda::sm90 {

struct WorkTile {
  int m_block;
  int head;
  int batch;
};

struct PersistentTileScheduler {
  struct Params {
    int num_m_blocks;
    int num_heads;
    int num_tiles;  // num_m_blocks * num_heads * batch
    bool longest_first;
    // Dynamic claims (longest_first only): {claimed, done}, zero between launches; each launch
    // leaves them at zero (retire). nullptr: one block per tile when longest_first.
    int* counter;
  };

  static Params make_params(int num_m_blocks, int num_heads, int batch, bool longest_first, int* counter) {
    return Params{num_m_blocks, num_heads, num_m_blocks * num_heads * batch, longest_first,
                  longest_first ? counter : nullptr};
  }

  __host__ __device__ static bool dynamic(const Params& p) { return p.counter != nullptr; }

  static dim3 grid(const Params& p, int num_sms) {
    const bool one_per_tile = p.longest_first && !dynamic(p);
    const int blocks = one_per_tile || p.num_tiles < num_sms ? p.num_tiles : num_sms;
    return dim3(static_cast<unsigned>(blocks));
  }

  // The index of this block's n-th work tile without a claim counter.
  static __device__ __forceinline__ int static_tile(int n) {
    return static_cast<int>(blockIdx.x) + n * static_cast<int>(gridDim.x);
  }
  // With one (the producer's thread, in order): the first tile is the block's own, every later
  // one is claimed. Each block's last claim fails (>= num_tiles), so a launch makes exactly
  // num_tiles claims past its grid.
  static __device__ __forceinline__ int claim_tile(const Params& p, int n) {
    return n == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);
  }
  // After the block's failed claim: the last block to get there (every block has made its last
  // claim) sets the counter back to zero for the next launch on the stream.
  static __device__ __forceinline__ void retire(const Params& p) {
    if (atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(p.counter, 0);
      atomicExch(p.counter + 1, 0);
    }
  }
  static __device__ __forceinline__ bool valid(const Params& p, int index) { return index < p.num_tiles; }

  static __device__ __forceinline__ WorkTile tile(const Params& p, int index) {
    const int m = index % p.num_m_blocks;
    const int head_batch = index / p.num_m_blocks;
    return WorkTile{p.longest_first ? p.num_m_blocks - 1 - m : m, head_batch % p.num_heads, head_batch / p.num_heads};
  }
};

}  // namespace flashtrain::cuda::sm90
