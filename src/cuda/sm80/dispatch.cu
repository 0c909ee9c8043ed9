// run_fwd / run_bwd: choose the instantiation for the problem's dtype and head dims. Each
// run_*_hdim<Dqk, Dv, Element> lives in its own generated file (src/cuda/instantiations/); pairs
// not built are compiled out here and refused earlier by cuda::refusal().
#include <cutlass/numeric_types.h>

#include "../common/built_hdims.h"
#include "bwd_plan.h"
#include "launch.h"

namespace flashtrain::cuda::sm80 {

// Defined in fwd_launch_template.h / bwd_launch_template.h, instantiated per generated file.
template <int kDimQK, int kDimV, typename Element>
void run_fwd_hdim(const Problem& p, cudaStream_t stream);
template <int kDimQK, int kDimV, typename Element>
void run_bwd_hdim(const Problem& p, void* workspace, cudaStream_t stream);
template <int kDimQK, int kDimV, typename Element>
void run_bwd_safe_hdim(const Problem& p, void* workspace, cudaStream_t stream);

namespace {

struct FwdStage {
  template <int kDimQK, int kDimV, typename Element>
  static void run(const Problem& p, void*, cudaStream_t stream) {
    run_fwd_hdim<kDimQK, kDimV, Element>(p, stream);
  }
};
struct BwdStage {
  template <int kDimQK, int kDimV, typename Element>
  static void run(const Problem& p, void* workspace, cudaStream_t stream) {
    run_bwd_hdim<kDimQK, kDimV, Element>(p, workspace, stream);
  }
};
struct BwdSafeStage {
  template <int kDimQK, int kDimV, typename Element>
  static void run(const Problem& p, void* workspace, cudaStream_t stream) {
    run_bwd_safe_hdim<kDimQK, kDimV, Element>(p, workspace, stream);
  }
};

// Runs Stage for (kDimQK, kDimV) when p has those dims and they were built; true if it ran.
template <typename Stage, int kDimQK, int kDimV>
bool try_pair(const Problem& p, void* workspace, cudaStream_t stream) {
  if constexpr (head_dim_built(kDimQK)) {
    if (p.dim_qk != kDimQK || p.dim_v != kDimV) return false;
    if (p.dtype == DType::kFloat16) {
      Stage::template run<kDimQK, kDimV, cutlass::half_t>(p, workspace, stream);
      return true;
    }
    if (p.dtype == DType::kBFloat16) {
      Stage::template run<kDimQK, kDimV, cutlass::bfloat16_t>(p, workspace, stream);
      return true;
    }
  }
  return false;
}

template <typename Stage>
void dispatch(const char* stage, const Problem& p, void* workspace, cudaStream_t stream) {
  const bool ran = try_pair<Stage, 64, 64>(p, workspace, stream) || try_pair<Stage, 96, 96>(p, workspace, stream) ||
                   try_pair<Stage, 128, 128>(p, workspace, stream) ||
                   try_pair<Stage, 192, 128>(p, workspace, stream) ||
                   try_pair<Stage, 192, 192>(p, workspace, stream) ||
                   try_pair<Stage, 256, 256>(p, workspace, stream);
  // cuda::refusal() rejects these first; reaching here means a caller skipped it.
  FT_CHECK(ran, "cuda ", stage, ": no kernel for dtype ", dtype_name(p.dtype), ", head dims (Dqk=", p.dim_qk,
           ", Dv=", p.dim_v, "); built head dims: ", FLASHTRAIN_HDIMS_BUILT);
}

}  // namespace

void run_fwd(const Problem& p, cudaStream_t stream) { dispatch<FwdStage>("forward", p, nullptr, stream); }

void run_bwd(const Problem& p, void* workspace, cudaStream_t stream) {
  dispatch<BwdStage>("backward", p, workspace, stream);
}

void run_bwd_safe(const Problem& p, void* workspace, cudaStream_t stream) {
  dispatch<BwdSafeStage>("backward (safe pass)", p, workspace, stream);
}

std::size_t bwd_workspace_size(const Problem& p) { return bwd_workspace_bytes(p); }

}  // namespace flashtrain::cuda::sm80
