// Entry points of the sm80 (mma.sync) kernels, called by src/cuda/backend.cu.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "../../api/problem.h"

namespace flashtrain::cuda::sm80 {

void run_fwd(const Problem& p, cudaStream_t stream);
// workspace holds at least bwd_workspace_size(p) bytes.
void run_bwd(const Problem& p, void* workspace, cudaStream_t stream);
// The overflow guard's safe pass (bwd_plan.h, BwdPass): enqueued after run_bwd or the sm90
// backward on the same workspace; recomputes dq, dk, dv only when the normal pass raised the flag.
void run_bwd_safe(const Problem& p, void* workspace, cudaStream_t stream);
// Copies the guard's words of the last pass on `workspace` into *p.report (safe-mode reruns,
// max |dS|); synchronises the stream. Only for calls that asked for a report.
void read_bwd_numerics(const Problem& p, const void* workspace, cudaStream_t stream);
std::size_t bwd_workspace_size(const Problem& p);

}  // namespace flashtrain::cuda::sm80
