// FwdParams: what the forward kernel reads, built on the host from a Problem. Plain data passed
// by value as a kernel argument; strides in elements.
#pragma once
#include <cstdint>

#include "../../api/problem.h"
#include "../common/dropout.h"
#include "../common/fast_math.h"
#include "fwd_telemetry.h"

namespace flashtrain::cuda::sm80 {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;
  Strides3 sq, sk, sv, so;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  int batch, heads_q, heads_k, group;
  int max_seqlen_q, max_seqlen_k;  // dense: Sq and Sk
  bool varlen;
  const int32_t* cu_seqlens_q;  // device, varlen only
  const int32_t* cu_seqlens_k;

  float scale;       // softmax_scale
  float scale_log2;  // softmax_scale * log2(e): exp(scale * s) = exp2(scale_log2 * s)
  // Softcap or ALiBi on: scores are transformed to natural units before the softmax, which then
  // uses log2(e) as its scale.
  bool transform;
  float softcap;  // 0 = off
  bool bottom_right;
  int64_t window_left, window_right;  // causal folded into right = 0
  const float* alibi_slopes;          // null = off
  int64_t alibi_batch_stride;

  DropoutParams dropout;
  float out_scale;  // 1 / (1 - p): kept probabilities are rescaled once, on the output (1 when off)

  FwdTelemetryWords* telemetry;  // null unless AttentionOptions::report is set
};

// Lengths and first rows of batch b (cu_seqlens read on the device for varlen).
struct FwdSeq {
  int len_q, len_k;
  int64_t start_q, start_k;  // first row of batch b in a varlen tensor; 0 when dense
  int64_t diag;              // row i's diagonal column is i + diag

  __device__ FwdSeq(const FwdParams& p, int b) {
    if (p.varlen) {
      start_q = p.cu_seqlens_q[b];
      start_k = p.cu_seqlens_k[b];
      len_q = p.cu_seqlens_q[b + 1] - static_cast<int>(start_q);
      len_k = p.cu_seqlens_k[b + 1] - static_cast<int>(start_k);
    } else {
      start_q = start_k = 0;
      len_q = p.max_seqlen_q;
      len_k = p.max_seqlen_k;
    }
    diag = p.bottom_right ? len_k - len_q : 0;
  }
  __device__ MaskSpec mask(const FwdParams& p) const {
    return MaskSpec{diag, p.window_left, p.window_right, len_k};
  }
};

// ALiBi slope of (b, h), 0 without ALiBi. Read where it is used (an L1 hit) rather than kept in a
// register across the main loop.
__device__ __forceinline__ float alibi_slope(const FwdParams& p, int b, int h) {
  return p.alibi_slopes != nullptr ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0f;
}

inline FwdParams make_fwd_params(const Problem& p) {
  FwdParams r{};
  r.q = p.q.data;
  r.k = p.k.data;
  r.v = p.v.data;
  r.out = p.out.data;
  r.lse = static_cast<float*>(p.lse.data);
  r.sq = p.sq;
  r.sk = p.sk;
  r.sv = p.sv;
  r.so = p.so;
  r.lse_batch_stride = p.lse_batch_stride;
  r.lse_head_stride = p.lse_head_stride;
  r.lse_row_stride = p.lse_row_stride;

  r.batch = static_cast<int>(p.batch);
  r.heads_q = static_cast<int>(p.heads_q);
  r.heads_k = static_cast<int>(p.heads_k);
  r.group = static_cast<int>(p.group());
  r.max_seqlen_q = static_cast<int>(p.max_seqlen_q);
  r.max_seqlen_k = static_cast<int>(p.max_seqlen_k);
  r.varlen = p.varlen;
  r.cu_seqlens_q = p.cu_seqlens_q;
  r.cu_seqlens_k = p.cu_seqlens_k;

  r.scale = static_cast<float>(p.scale);
  r.scale_log2 = static_cast<float>(p.scale * static_cast<double>(kLog2e));
  r.softcap = static_cast<float>(p.softcap);
  r.alibi_slopes = p.alibi_slopes;
  r.alibi_batch_stride = p.alibi_batch_stride;
  r.transform = p.softcap > 0.0 || p.alibi_slopes != nullptr;
  r.bottom_right = p.align == CausalAlign::kBottomRight;
  r.window_left = p.window_left;
  r.window_right = p.window_right;

  r.dropout = DropoutParams{p.seed, p.offset, p.dropout_threshold};
  r.out_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
  return r;
}

}  // namespace flashtrain::cuda::sm80
