// Entry points of the sm80 (mma.sync) kernels, called by src/cuda/backend.cu.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "../../api/problem.h"

namespace flashtrain::cuda::sm80 {

void run_fwd(const Problem& p, cudaStream_t stream);
// workspace holds at least bwd_workspace_size(p) bytes.
void run_bwd(const Problem& p, void* workspace, cudaStream_t stream);
std::size_t bwd_workspace_size(const Problem& p);

}  // namespace flashtrain::cuda::sm80
