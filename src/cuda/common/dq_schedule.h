// Host side of the backward's dQ walk (tile_range.h): whether a main-kernel launch walks its Q
// tiles in the rotated order. Shared by the sm80 and sm90 launchers.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "../../api/problem.h"
#include "../../common/mask.h"
#include "cuda_check.h"
#include "tile_range.h"

namespace flashtrain::cuda {

// Deterministic mode takes the rotated order when the mask allows it and every KV tile of one
// (batch, head group) can be resident at once (its waits need that: `kernel` launched with
// `threads` and `smem_bytes`, n_blocks KV tiles per group), with whole groups filling the
// resident slots (rotated_dq_walk_packs). FLASHTRAIN_DQ_SCHEDULE: "wavefront"
// never rotates (the wavefront needs no co-residency, e.g. beside kernels that hold SMs
// indefinitely); "rotated" also rotates the default mode's walk (it waits on nothing there; on
// the H200 the same speed without a mask and 2-5% slower under causal ones, which lose the sm90
// launcher's band order: bench/results/2026-12-03_run15, so not the default); unset or "auto":
// deterministic mode only. block_m / block_n (> 0): the launcher starts each head's key tiles in
// descending order (dq_launch_key_tile, the sm90 one), so a causal walk whose waits all point up
// (rotated_dq_waits_point_up) rotates whatever the residency.
template <class Kernel>
bool rotate_dq_walk(const Problem& problem, int n_blocks, Kernel kernel, int threads, int smem_bytes,
                    int block_m = 0, int block_n = 0) {
  enum class Choice { kAuto, kWavefront, kRotated };
  static const Choice choice = [] {
    const char* env = std::getenv("FLASHTRAIN_DQ_SCHEDULE");
    const std::string v = env ? env : "";
    return v == "wavefront" ? Choice::kWavefront : v == "rotated" ? Choice::kRotated : Choice::kAuto;
  }();
  const MaskSpec mask = problem.mask(problem.max_seqlen_q, problem.max_seqlen_k);
  if (choice == Choice::kWavefront || problem.varlen || !rotated_dq_order_applies(mask, problem.max_seqlen_q))
    return false;
  if (!problem.deterministic) return choice == Choice::kRotated;
  if (block_m > 0 && rotated_dq_waits_point_up(mask, block_m, block_n)) return true;
  int device = 0, sms = 0, per_sm = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device), "cuda backward: cudaGetDevice");
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cuda backward: SM count");
  FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes),
                "cuda backward: occupancy of the main kernel");
  return rotated_dq_walk_packs(n_blocks, sms * per_sm);
}

}  // namespace flashtrain::cuda
