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

}  // namespace flashtrain::cuda::sm90
