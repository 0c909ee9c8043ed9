// Host side of the forward: tile shape per head dim, grid, shared-memory opt-in and the launch.
// Included by the generated src/cuda/instantiations/fwd_hdim*_sm80.cu files, one per
// (head-dim pair, dtype), each instantiating run_fwd_hdim once.
#pragma once
#include <cuda_runtime.h>

#include "../../api/problem.h"
#include "../common/cuda_check.h"
#include "fwd_kernel.h"
#include "fwd_kernel_traits.h"
#include "fwd_params.h"

namespace flashtrain::cuda::sm80 {

// Tile shape per head dim and kernel variant, for an H200-class SM (227 KB shared memory, 64K
// registers). Warps split the 128 query rows, so a warp holds 16 * 128 / (16 * kWarps) rows of
// the fp32 output accumulator (Dv wide) plus the same rows of the fp32 score tile (kBlockN
// wide). Each choice is the largest tile that compiles without spills (-Xptxas -v, sm_90a):
//   Dqk <= 96: 4 warps (plain); 8 warps with the dropout / softcap / ALiBi state (kFeatures).
//   Dqk 128, 192: 8 warps, 64-key tiles.
//   Dqk 256: the output accumulator alone is 128 registers per thread, so key tiles shrink to
//   32 (the kFeatures variant still spills 28 bytes there; 16-key tiles would not, but are
//   narrower than one pass of the 256-thread K/V copy).
template <int kDimQK, int kDimV, bool kFeatures>
struct FwdTileConfig {
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = kDimQK < 256 ? 64 : 32;
  static constexpr int kWarps = kDimQK <= 96 && !kFeatures ? 4 : 8;
};

template <typename Traits, bool kFeatures>
void launch_fwd(const FwdParams& params, cudaStream_t stream) {
  const int m_blocks = (params.max_seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  if (m_blocks == 0 || params.batch == 0 || params.heads_q == 0) return;
  FT_CHECK(params.batch <= 65535 && params.heads_q <= 65535, "cuda forward: batch (", params.batch,
           ") and query heads (", params.heads_q, ") must each be <= 65535 (grid limit)");
  auto kernel = &fwd_kernel<Traits, kFeatures>;
  constexpr int kSmem = Traits::kSmemBytes;
  // Above 48 KB a kernel must opt in to dynamic shared memory; cheap enough to do per call.
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                "cuda forward: cannot reserve ", kSmem, " bytes of shared memory for head dim ",
                Traits::kDimQK);
  const dim3 grid(m_blocks, params.heads_q, params.batch);
  kernel<<<grid, Traits::kThreads, kSmem, stream>>>(params);
  check_launch("flashtrain fwd_kernel");
}

template <int kDimQK, int kDimV, typename Element, bool kFeatures>
void run_fwd_config(const FwdParams& params, cudaStream_t stream) {
  using Config = FwdTileConfig<kDimQK, kDimV, kFeatures>;
  using Traits = FwdKernelTraits<kDimQK, kDimV, Config::kBlockM, Config::kBlockN, Config::kWarps, Element>;
  launch_fwd<Traits, kFeatures>(params, stream);
}

template <int kDimQK, int kDimV, typename Element>
void run_fwd_hdim(const Problem& p, cudaStream_t stream) {
  FwdParams params = make_fwd_params(p);
  const bool features = p.dropout_p > 0.0 || params.transform;
  if (p.report == nullptr) {
    features ? run_fwd_config<kDimQK, kDimV, Element, true>(params, stream)
             : run_fwd_config<kDimQK, kDimV, Element, false>(params, stream);
    return;
  }
  params.telemetry = begin_fwd_telemetry(stream);
  try {
    features ? run_fwd_config<kDimQK, kDimV, Element, true>(params, stream)
             : run_fwd_config<kDimQK, kDimV, Element, false>(params, stream);
  } catch (...) {
    cudaFreeAsync(params.telemetry, stream);
    throw;
  }
  finish_fwd_telemetry(p, params.telemetry, stream);
}

}  // namespace flashtrain::cuda::sm80
