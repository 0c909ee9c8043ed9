// The backward's exponent of one element in log2 units, recomputed as the forward computed it, so
// that exp2(exponent) is the forward's P: scale * s, or softcap * tanh(scale * s / softcap), minus
// the ALiBi bias slope * |i + diag - j|, minus lse * log2e (the mask is applied by the caller).
// Without softcap or ALiBi it is one FMA, s * scale_log2 - lse_log2, as the forward's
// s * scale_log2 - offset (a separately rounded product would move the exponent by up to half an
// fp32 ulp of the logit, which at logits ~1e3 is a visible part of an fp16 ulp of P). Shared by
// the main kernel (bwd_kernel.h) and the exact-D pass (bwd_exact_dsum.h), whose P must agree.
#pragma once
#include <cuda_runtime.h>

#include "../common/fast_math.h"
#include "bwd_params.h"

namespace flashtrain::cuda::sm80 {

struct ScoreLog2 {
  float exponent;
  float dtanh;  // d(softcap * tanh(x / softcap)) / dx at the element: the chain rule's factor on dS
};

// s: the raw q.k of the element; lse2: its row's lse * log2(e); slope_log2: the head's ALiBi
// slope * log2(e) (0 without ALiBi); diag_i - j: the element's signed distance from the diagonal.
__device__ __forceinline__ ScoreLog2 bwd_score_log2(const BwdParams& p, float s, float lse2, float slope_log2,
                                                    int diag_i, int j) {
  if (p.softcap <= 0.0f && slope_log2 == 0.0f) return {fmaf(s, p.scale_log2, -lse2), 1.0f};
  ScoreLog2 r{s * p.scale_log2, 1.0f};
  if (p.softcap > 0.0f) {
    const float t = tanhf(s * p.scale_over_cap);
    r.exponent = p.softcap * kLog2e * t;
    r.dtanh = 1.0f - t * t;
  }
  if (slope_log2 != 0.0f) r.exponent -= slope_log2 * static_cast<float>(abs(diag_i - j));
  r.exponent -= lse2;
  return r;
}

}  // namespace flashtrain::cuda::sm80
