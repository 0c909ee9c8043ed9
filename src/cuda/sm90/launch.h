// Entry points of the sm90a (Hopper wgmma + TMA, warp-specialised) forward kernel, called by
// src/cuda/backend.cu on compute capability 9.0 devices. Problems it cannot run are refused with
// a readable reason, and the caller falls back to the sm80 path, which supports everything.
#pragma once
#include <string>

#include <cuda_runtime.h>

#include "../../api/problem.h"

namespace flashtrain::cuda::sm90 {

// Empty when run_fwd can run p; otherwise every reason it cannot, one per line, each starting
// with "sm90: ".
std::string refusal(const Problem& p);

// Computes p.out and p.lse on `stream`. Requires refusal(p) to be empty.
void run_fwd(const Problem& p, cudaStream_t stream);

// Backward: empty when run_bwd can run p, otherwise every reason, one per line ("sm90: ...").
std::string bwd_refusal(const Problem& p);

// dq, dk, dv of p on `stream`: the sm80 preprocess, the sm90 main kernel, the sm80 postprocess,
// over the workspace sm80::bwd_workspace_size(p) describes. Requires bwd_refusal(p) to be empty.
void run_bwd(const Problem& p, void* workspace, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm90
