// Launches the sm80 backward for one (Dqk, Dv, Element): preprocess -> main -> postprocess, all on
// `stream`, no synchronisation and no allocation (the workspace holds bwd_workspace_bytes(p),
// laid out as documented in bwd_plan.h). run_bwd_hdim is the normal pass; run_bwd_safe_hdim the
// overflow guard's safe pass, enqueued after the normal pass of either path (sm80 or sm90 main
// kernel): its kernels exit at once unless the normal pass raised the guard's flag, on one wave
// of blocks each (common/gated_grid.h). With Precision::kHigh, run_bwd_safe_hdim is the
// backward's only pass instead, on full grids: the normal preprocess, D recomputed as
// sum_j P_ij dL/dP_ij from q, k, v, dO and lse with P's rows renormalised (bwd_exact_dsum.h, which
// also writes the lse_fix the main kernel subtracts), then the safe main kernel (P and dS split
// into hi + lo halves, bwd_safe_scale.h) and postprocess, which run because the launcher raises
// kFlagSplitPassAsMain. The guard's rerun also takes the exact D. Both are instantiated once per
// head-dim pair and dtype by the files src/cuda/instantiations/generate.py writes.
#pragma once
#include <cuda_runtime.h>

#include "../common/cuda_check.h"
#include "../common/dq_schedule.h"
#include "../common/gated_grid.h"
#include "bwd_exact_dsum.h"
#include "bwd_kernel.h"
#include "bwd_kernel_traits.h"
#include "bwd_params.h"
#include "bwd_plan.h"
#include "bwd_postprocess.h"
#include "bwd_preprocess.h"
#include "bwd_safe_scale.h"

namespace flashtrain::cuda::sm80 {

template <int kDimQK, int kDimV, typename Element, BwdPass kPass>
void run_bwd_pass(const Problem& problem, void* workspace, cudaStream_t stream) {
  using Traits = BwdTraits<kDimQK, kDimV, Element>;
  const BwdPlan plan = make_bwd_plan(problem);
  BwdParams params = make_bwd_params(problem, plan, workspace);

  if (kPass == BwdPass::kSafe && problem.precision == Precision::kHigh) {
    // The safe pass as the only pass: lse_log2 and zeroed accumulators and words from the
    // normal preprocess (no rerun counted), D recomputed without the rounding of `out`
    // (bwd_exact_dsum.h), then the flag that lets the safe kernels run.
    launch_bwd_preprocess<Element, kDimQK, kDimV, BwdPass::kNormal>(params, stream);
    check_launch("bwd_preprocess");
    launch_bwd_exact_dsum<Element, kDimQK, kDimV, false>(params, stream);
    raise_split_pass_flag(params.numerics, stream);
  } else {
    launch_bwd_preprocess<Element, kDimQK, kDimV, kPass>(params, stream);
    check_launch("bwd_preprocess");
    // The guard's rerun takes the exact D too: rowsum(dO * O) carries the rounding of `out`,
    // which with the large dO that makes a pass overflow dominates the dQ / dK error.
    if constexpr (kPass == BwdPass::kSafe) launch_bwd_exact_dsum<Element, kDimQK, kDimV, true>(params, stream);
  }

  if (plan.n_blocks > 0 && problem.batch > 0) {
    auto* kernel = &bwd_main_kernel<Traits, kPass>;
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                  "cuda backward: giving bwd_main ", Traits::kSmemBytes, " bytes of shared memory (head dims ",
                  kDimQK, "/", kDimV, ")");
    const TileGrid tiles{plan.n_blocks, static_cast<int>(problem.batch),
                         static_cast<int>(problem.heads_k * plan.head_chunks)};
    // After the shared-memory attribute: the occupancy queries need it. The guard's rerun walks
    // its tiles on one wave (gated_grid.h), whose order the wavefront dQ walk needs.
    // Precision::kHigh's split pass is the only pass: a block per tile, on a 1-D grid as the walk
    // reads it.
    dim3 grid = tiles.full();
    if (kPass == BwdPass::kSafe && problem.precision != Precision::kHigh) {
      grid = dim3(safe_pass_blocks(tiles.count(), kernel, Traits::kNThreads, Traits::kSmemBytes));
    } else {
      params.dq_rotated = rotate_dq_walk(problem, plan.n_blocks, kernel, Traits::kNThreads, Traits::kSmemBytes);
      if (kPass == BwdPass::kSafe) grid = dim3(static_cast<unsigned>(tiles.count()));
    }
    kernel<<<grid, Traits::kNThreads, Traits::kSmemBytes, stream>>>(params, tiles);
    check_launch("bwd_main");
  }

  launch_bwd_postprocess<Element, kDimQK, kDimV, kPass>(params, stream);
  check_launch("bwd_postprocess");
}

template <int kDimQK, int kDimV, typename Element>
void run_bwd_hdim(const Problem& problem, void* workspace, cudaStream_t stream) {
  run_bwd_pass<kDimQK, kDimV, Element, BwdPass::kNormal>(problem, workspace, stream);
}

template <int kDimQK, int kDimV, typename Element>
void run_bwd_safe_hdim(const Problem& problem, void* workspace, cudaStream_t stream) {
  run_bwd_pass<kDimQK, kDimV, Element, BwdPass::kSafe>(problem, workspace, stream);
}

}  // namespace flashtrain::cuda::sm80
