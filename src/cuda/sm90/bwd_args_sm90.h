// What the sm90 backward's host code passes from the dispatcher (bwd_dispatch_sm90.cu) to the
// per-(dtype, head dim) launchers: the Problem plus TMA-legal strides of the tensors the main
// kernel loads. Kept free of CuTe types so the dispatcher compiles without the kernel headers.
#pragma once
#include <cuda_runtime.h>

#include "../../api/problem.h"
#include "fwd_args_sm90.h"

namespace flashtrain::cuda::sm90 {

struct BwdTensorStrides {
  FwdStrides q, k, v, dout;
};

// Defined in bwd_launch_template_sm90.h, instantiated once per (Element, head dim) in
// src/cuda/instantiations/bwd_hdim{D}_{fp16|bf16}_sm90.cu.
template <typename Element, int kHeadDim>
void run_bwd_hdim(const Problem& problem, const BwdTensorStrides& strides, void* workspace, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm90
