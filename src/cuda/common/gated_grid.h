// Grids of the overflow guard's safe pass (sm80/bwd_plan.h, BwdPass::kSafe). The pass is enqueued
// after every backward and its kernels exit at once unless the normal pass raised the flag, but an
// empty block still has to be scheduled: on its full grid a gated kernel costs every wave of the
// grid (16 waves for the main kernel at head dim 128, B=16, H=16, S=1k), which measured as 10-17%
// of the backward at S=1k on the H200. So a gated kernel runs on one wave -- the blocks the GPU
// holds at once -- and each block walks the full grid's tiles blockIdx.x, blockIdx.x + gridDim.x,
// ... in that order.
//
// Tile x of the full grid is the fastest coordinate of the walk. A tile that waits on a lower x of
// the same (y, z) (the deterministic dQ turn, bwd_epilogue.h) waits on a tile that a resident block
// visits earlier or at the same time, and every block of the one wave is resident, so the walk
// cannot hang.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "cuda_check.h"
#include "per_device.h"

namespace flashtrain::cuda {

struct TileGrid {
  int x = 1, y = 1, z = 1;

  __host__ __device__ int64_t count() const { return static_cast<int64_t>(x) * y * z; }
  dim3 full() const { return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)); }
};

// Calls f(x, y, z) for this block's tiles of `grid`, on a 1-D launch of any size (a launch of
// grid.count() blocks gives each block one tile); the whole block
// calls it, and a __syncthreads() separates consecutive tiles (their shared memory is reused).
template <class F>
__device__ __forceinline__ void for_each_tile(const TileGrid& grid, F&& f) {
  const int64_t total = grid.count();
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    if (t != blockIdx.x) __syncthreads();
    const int64_t yz = t / grid.x;
    f(static_cast<int>(t - yz * grid.x), static_cast<int>(yz % grid.y), static_cast<int>(yz / grid.y));
  }
}

// Blocks of one wave of `kernel` (threads per block, dynamic shared memory) on the current device,
// at most `tiles` and at least 1. The occupancy is queried once per kernel and device.
template <class Kernel>
unsigned one_wave_blocks(int64_t tiles, Kernel kernel, int threads, int smem_bytes) {
  const int wave = once_per_device<Kernel>([&](int device) {
    int sms = 0, per_sm = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cuda backward: SM count");
    FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes),
                  "cuda backward: occupancy of a safe-pass kernel");
    return sms * (per_sm > 0 ? per_sm : 1);
  });
  const int64_t blocks = tiles < wave ? tiles : wave;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

// The blocks of a gated safe-pass launch: one wave, or fewer under FLASHTRAIN_SAFE_PASS_BLOCKS=N,
// so that small test cases make each block walk many tiles (tests/cpp/test_cuda_numerics.cpp,
// gpu_check's racecheck). Read on every call (tests set it around single cases); the normal pass
// never reads it.
template <class Kernel>
unsigned safe_pass_blocks(int64_t tiles, Kernel kernel, int threads, int smem_bytes) {
  unsigned blocks = one_wave_blocks(tiles, kernel, threads, smem_bytes);
  if (const char* cap = std::getenv("FLASHTRAIN_SAFE_PASS_BLOCKS")) {
    const int n = std::atoi(cap);
    if (n > 0 && static_cast<unsigned>(n) < blocks) blocks = static_cast<unsigned>(n);
  }
  return blocks;
}

}  // namespace flashtrain::cuda
