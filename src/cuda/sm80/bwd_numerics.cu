// The host side of the backward's guard words (bwd_plan.h, BwdNumericsWords): read only when the
// caller asked for a NumericsReport, the one case where the backward may synchronise; and the flag
// that runs the safe pass as the only pass for Precision::kHigh (bwd_safe_scale.h).
#include <algorithm>

#include "../common/cuda_check.h"
#include "bwd_plan.h"
#include "bwd_safe_scale.h"
#include "fwd_telemetry.h"
#include "launch.h"

namespace flashtrain::cuda::sm80 {

namespace {
__global__ void raise_split_pass_flag_kernel(BwdNumericsWords* words) { words->nonfinite |= kFlagSplitPassAsMain; }
}  // namespace

void raise_split_pass_flag(BwdNumericsWords* words, cudaStream_t stream) {
  raise_split_pass_flag_kernel<<<1, 1, 0, stream>>>(words);
  check_launch("raise_split_pass_flag");
}

void read_bwd_numerics(const Problem& p, const void* workspace, cudaStream_t stream) {
  const BwdPlan plan = make_bwd_plan(p);
  BwdNumericsWords words{};
  FT_CUDA_CHECK(cudaMemcpyAsync(&words, static_cast<const char*>(workspace) + plan.numerics, sizeof words,
                                cudaMemcpyDeviceToHost, stream),
                "cuda backward telemetry: reading the guard's words");
  FT_CUDA_CHECK(cudaStreamSynchronize(stream), "cuda backward telemetry: waiting for the backward");
  NumericsReport& r = *p.report;
  r.safe_mode_reruns += static_cast<int64_t>(words.safe_reruns);
  r.max_abs_ds = std::max(r.max_abs_ds, static_cast<double>(ordered_to_float(words.max_abs_ds)));
}

}  // namespace flashtrain::cuda::sm80
