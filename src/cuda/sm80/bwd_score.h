// The backward's score of one element in log2 units, recomputed as the forward computed it, so
// that exp2(score - lse * log2e) is the forward's P: scale * s, or softcap * tanh(scale * s /
// softcap), minus the ALiBi bias slope * |i + diag - j| (the mask is applied by the caller). Shared
// by the main kernel (bwd_kernel.h) and the exact-D pass (bwd_exact_dsum.h), whose P must agree.
#pragma once
#include <cuda_runtime.h>

#include "../common/fast_math.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

struct ScoreLog2 {
  float score;
  float dtanh;  // d(softcap * tanh(x / softcap)) / dx at the element: the chain rule's factor on dS
};

// s: the raw q.k of the element; slope_log2: the head's ALiBi slope * log2(e) (0 without ALiBi);
// diag_i - j: the element's signed distance from the diagonal.
__device__ __forceinline__ ScoreLog2 bwd_score_log2(const BwdParams& p, float s, float slope_log2, int diag_i, int j) {
  ScoreLog2 r{0.0f, 1.0f};
  if (p.softcap > 0.0f) {
    const float t = tanhf(s * p.scale_over_cap);
    r.score = p.softcap * kLog2e * t;
    r.dtanh = 1.0f - t * t;
  } else {
    r.score = s * p.scale_log2;
  }
  if (slope_log2 != 0.0f) r.score -= slope_log2 * static_cast<float>(abs(diag_i - j));
  return r;
}

}  // namespace flashtrain::cuda::sm80
