// Host side of the sm90 forward for one (element type, head dim): builds the TMA descriptors
// and kernel parameters from FwdArgs and launches. Included only by the generated
// instantiation files (src/cuda/instantiations/fwd_hdim{D}_{fp16|bf16}_sm90.cu).
#pragma once
#include <cuda_runtime.h>

#include "../common/cuda_check.h"
#include "fwd_args_sm90.h"
#include "fwd_kernel_sm90.h"

namespace flashtrain::cuda::sm90 {

template <class Traits>
void launch_fwd(const FwdArgs& args, cudaStream_t stream) {
  const int num_m_blocks = (args.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  // Later query blocks see more keys (MaskSpec::upper_bound_only).
  const bool longest_first = args.mask.upper_bound_only();
  FwdParams<Traits> params{FwdMainloop<Traits>::make_params(args),
                           FwdEpilogue<Traits>::make_params(args),
                           PersistentTileScheduler::make_params(num_m_blocks, args.heads_q, args.batch, longest_first,
                                                                args.tile_counter),
                           args.mask,
                           args.seqlen_q,
                           args.scale};
  auto kernel = fwd_kernel_sm90<Traits>;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                "sm90 forward: raising the shared-memory limit to ", Traits::kSmemBytes, " bytes");
  const dim3 grid = PersistentTileScheduler::grid(params.scheduler, args.num_sms);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(params);
  check_launch("flashtrain::cuda::sm90::fwd_kernel_sm90");
}

template <typename Element, int kHeadDim>
void run_fwd_hdim(const FwdArgs& args, cudaStream_t stream) {
  constexpr int kLong = long_key_tile(kHeadDim);
  if constexpr (kLong > 0) {
    if (args.key_tile == kLong) return launch_fwd<FwdTraits<kHeadDim, Element, kLong>>(args, stream);
  }
  launch_fwd<FwdTraits<kHeadDim, Element>>(args, stream);
}

}  // namespace flashtrain::cuda::sm90
