// Problem: the validated, resolved description of one attention call that every backend receives.
// Built only by src/api/validate.cpp; backends never validate and never look at AttentionOptions.
#pragma once
#include <cstdint>
#include <vector>

#include "flashtrain/attention.h"
#include "../common/mask.h"

namespace flashtrain {

// Strides (in elements) of one BSHD-like tensor: batch (0 for varlen), sequence, head.
// The last dim is contiguous.
struct Strides3 {
  int64_t batch = 0, seq = 0, head = 0;
};

struct Problem {
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;
  bool varlen = false;

  int64_t batch = 0;
  int64_t heads_q = 0, heads_k = 0;
  int64_t dim_qk = 0, dim_v = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // dense: Sq and Sk
  int64_t total_q = 0, total_k = 0;            // varlen: rows of q and k; dense: B * S

  double scale = 0.0;
  double softcap = 0.0;  // 0 = off
  CausalAlign align = CausalAlign::kBottomRight;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // causal already folded into right = 0

  const float* alibi_slopes = nullptr;  // on the problem's device
  int64_t alibi_batch_stride = 0;       // 0 for [Hq], Hq for [B, Hq]

  double dropout_p = 0.0;
  uint32_t dropout_threshold = 0;
  uint64_t seed = 0, offset = 0;

  bool deterministic = false;
  Precision precision = Precision::kDefault;
  NumericsReport* report = nullptr;

  // On the problem's device. Dense: null.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // Host copies of cu_seqlens (CPU and reference backends read these; CUDA leaves them empty).
  std::vector<int32_t> host_cu_seqlens_q, host_cu_seqlens_k;

  // Tensors (views as given by the caller) and their strides.
  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  Strides3 sq, sk, sv, so, sdo, sdq, sdk, sdv;
  // lse: dense [B, Hq, Sq] -> (batch, head, row) strides; varlen [Hq, total_q] -> batch = 0.
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;

  void* stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;

  int64_t group() const { return heads_q / heads_k; }  // query heads per KV head

  // Host-side per-batch geometry (valid when host cu_seqlens are present or the problem is dense).
  int64_t seq_start_q(int64_t b) const { return varlen ? host_cu_seqlens_q[b] : 0; }
  int64_t seq_start_k(int64_t b) const { return varlen ? host_cu_seqlens_k[b] : 0; }
  int64_t seqlen_q(int64_t b) const {
    return varlen ? host_cu_seqlens_q[b + 1] - host_cu_seqlens_q[b] : max_seqlen_q;
  }
  int64_t seqlen_k(int64_t b) const {
    return varlen ? host_cu_seqlens_k[b + 1] - host_cu_seqlens_k[b] : max_seqlen_k;
  }
  MaskSpec mask(int64_t seqlen_q_b, int64_t seqlen_k_b) const {
    const int64_t diag = align == CausalAlign::kBottomRight ? seqlen_k_b - seqlen_q_b : 0;
    return MaskSpec{diag, window_left, window_right, seqlen_k_b};
  }
  float alibi_slope(int64_t b, int64_t h) const {
    return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + h] : 0.0f;
  }
};

// Offsets (elements) of row `row` (inside batch b's sequence) of head h for a tensor with strides s.
inline int64_t element_offset(const Problem& p, const Strides3& s, bool is_q_side, int64_t b,
                              int64_t row, int64_t h) {
  const int64_t start = is_q_side ? p.seq_start_q(b) : p.seq_start_k(b);
  return b * s.batch + (start + row) * s.seq + h * s.head;
}

inline int64_t lse_offset(const Problem& p, int64_t b, int64_t row, int64_t h) {
  return b * p.lse_batch_stride + h * p.lse_head_stride + (p.seq_start_q(b) + row) * p.lse_row_stride;
}

}  // namespace flashtrain
