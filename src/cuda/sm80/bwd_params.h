// BwdParams: what the three backward kernels read, built on the host from a Problem and a plan.
// Plain data passed by value as a kernel argument. Strides are in elements.
#pragma once
#include <cmath>
#include <cstdint>

#include "../../api/problem.h"
#include "../../common/host_device.h"
#include "../../common/mask.h"
#include "../common/fast_math.h"
#include "bwd_plan.h"

namespace flashtrain::cuda::sm80 {

struct BwdParams {
  // Inputs (element type erased; the kernels cast to their Element).
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* dout;
  const float* lse;
  void* dq;
  void* dk;
  void* dv;
  Strides3 sq, sk, sv, so, sdo, sdq, sdk, sdv;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  // Workspace segments (bwd_plan.h).
  float* lse_log2;
  float* dsum;
  float* lse_fix;
  float* do_scale;
  float* dq_accum;
  int* dq_sema;
  float* dk_accum;
  float* dv_accum;
  // The overflow guard's words. Kernels that store a gradient raise numerics->nonfinite through
  // raise_nonfinite_flag(&p.numerics->nonfinite, bad) (src/cuda/common/numerics_flags.h).
  BwdNumericsWords* numerics;
  bool telemetry;  // AttentionOptions::report set: the main kernel records max |dS|

  int batch, heads_q, heads_k, group;
  int heads_per_chunk, head_chunks;
  int max_seqlen_q, max_seqlen_k;  // dense: Sq and Sk
  int total_q, total_k;            // rows of the global row space
  int m_blocks;
  bool varlen;
  const int32_t* cu_seqlens_q;  // device, varlen only
  const int32_t* cu_seqlens_k;

  float scale;             // softmax_scale
  float scale_log2;        // softmax_scale * log2(e)
  float softcap;           // 0 = off
  float scale_over_cap;    // softmax_scale / softcap
  bool bottom_right;       // causal / window diagonal alignment
  int64_t window_left, window_right;
  const float* alibi_slopes;
  int64_t alibi_batch_stride;

  bool dropout;
  uint32_t dropout_threshold;
  float dropout_rescale;  // 1 / (1 - p)
  uint64_t seed, offset;

  bool deterministic;
  bool dq_rotated;      // Q tiles walked (and, deterministic, dQ turns taken) in tile_range.h's rotated order
  bool accumulate_dkv;  // dK/dV go through dk_accum/dv_accum (head_chunks > 1)
};

// Rows and alignment of batch b, read from cu_seqlens on the device for varlen.
struct SeqGeometry {
  int len_q, len_k;
  int row_q, row_k;      // first global row of this batch (workspace row space)
  int start_q, start_k;  // first tensor row: row_q / row_k for varlen, 0 for dense (batch stride)
  int diag;              // alignment offset: row i's diagonal column is i + diag

  __device__ SeqGeometry(const BwdParams& p, int b) {
    if (p.varlen) {
      row_q = p.cu_seqlens_q[b];
      row_k = p.cu_seqlens_k[b];
      len_q = p.cu_seqlens_q[b + 1] - row_q;
      len_k = p.cu_seqlens_k[b + 1] - row_k;
      start_q = row_q;
      start_k = row_k;
    } else {
      len_q = p.max_seqlen_q;
      len_k = p.max_seqlen_k;
      row_q = b * len_q;
      row_k = b * len_k;
      start_q = 0;
      start_k = 0;
    }
    diag = p.bottom_right ? len_k - len_q : 0;
  }
  // Built where it is used rather than kept: its int64 fields would hold registers all along.
  __device__ MaskSpec mask(const BwdParams& p) const {
    return MaskSpec{diag, p.window_left, p.window_right, len_k};
  }
  // Element offset of row i (inside this batch) of head h in a q-side / k-side tensor.
  __device__ int64_t q_offset(const Strides3& s, int b, int i, int h) const {
    return static_cast<int64_t>(b) * s.batch + static_cast<int64_t>(start_q + i) * s.seq +
           static_cast<int64_t>(h) * s.head;
  }
  __device__ int64_t k_offset(const Strides3& s, int b, int j, int h) const {
    return static_cast<int64_t>(b) * s.batch + static_cast<int64_t>(start_k + j) * s.seq +
           static_cast<int64_t>(h) * s.head;
  }
};

inline BwdParams make_bwd_params(const Problem& p, const BwdPlan& plan, void* workspace) {
  BwdParams r{};
  r.q = p.q.data;
  r.k = p.k.data;
  r.v = p.v.data;
  r.out = p.out.data;
  r.dout = p.dout.data;
  r.lse = static_cast<const float*>(p.lse.data);
  r.dq = p.dq.data;
  r.dk = p.dk.data;
  r.dv = p.dv.data;
  r.sq = p.sq;
  r.sk = p.sk;
  r.sv = p.sv;
  r.so = p.so;
  r.sdo = p.sdo;
  r.sdq = p.sdq;
  r.sdk = p.sdk;
  r.sdv = p.sdv;
  r.lse_batch_stride = p.lse_batch_stride;
  r.lse_head_stride = p.lse_head_stride;
  r.lse_row_stride = p.lse_row_stride;

  char* ws = static_cast<char*>(workspace);
  if (plan.stats_in_dq) {
    r.lse_log2 = static_cast<float*>(p.dq.data);
    r.dsum = r.lse_log2 + p.heads_q * p.total_q;
    r.lse_fix = r.dsum + p.heads_q * p.total_q;
    r.do_scale = r.lse_fix + p.heads_q * p.total_q;
  } else {
    r.lse_log2 = reinterpret_cast<float*>(ws + plan.lse_log2);
    r.dsum = reinterpret_cast<float*>(ws + plan.dsum);
    r.lse_fix = reinterpret_cast<float*>(ws + plan.lse_fix);
    r.do_scale = reinterpret_cast<float*>(ws + plan.do_scale);
  }
  r.dq_accum = reinterpret_cast<float*>(ws + plan.dq_accum);
  r.dq_sema = plan.dq_sema_elems ? reinterpret_cast<int*>(ws + plan.dq_sema) : nullptr;
  r.dk_accum = plan.dk_accum_elems ? reinterpret_cast<float*>(ws + plan.dk_accum) : nullptr;
  r.dv_accum = plan.dv_accum_elems ? reinterpret_cast<float*>(ws + plan.dv_accum) : nullptr;
  r.numerics = reinterpret_cast<BwdNumericsWords*>(ws + plan.numerics);
  r.telemetry = p.report != nullptr;

  r.batch = static_cast<int>(p.batch);
  r.heads_q = static_cast<int>(p.heads_q);
  r.heads_k = static_cast<int>(p.heads_k);
  r.group = static_cast<int>(p.group());
  r.head_chunks = plan.head_chunks;
  r.heads_per_chunk = r.group / plan.head_chunks;
  r.max_seqlen_q = static_cast<int>(p.max_seqlen_q);
  r.max_seqlen_k = static_cast<int>(p.max_seqlen_k);
  r.total_q = static_cast<int>(p.total_q);
  r.total_k = static_cast<int>(p.total_k);
  r.m_blocks = plan.m_blocks;
  r.varlen = p.varlen;
  r.cu_seqlens_q = p.cu_seqlens_q;
  r.cu_seqlens_k = p.cu_seqlens_k;

  r.scale = static_cast<float>(p.scale);
  r.scale_log2 = static_cast<float>(p.scale * static_cast<double>(kLog2e));  // as the forward does
  r.softcap = static_cast<float>(p.softcap);
  r.scale_over_cap = p.softcap > 0.0 ? static_cast<float>(p.scale / p.softcap) : 0.0f;
  r.bottom_right = p.align == CausalAlign::kBottomRight;
  r.window_left = p.window_left;
  r.window_right = p.window_right;
  r.alibi_slopes = p.alibi_slopes;
  r.alibi_batch_stride = p.alibi_batch_stride;

  r.dropout = p.dropout_p > 0.0;
  r.dropout_threshold = p.dropout_threshold;
  r.dropout_rescale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
  r.seed = p.seed;
  r.offset = p.offset;

  r.deterministic = p.deterministic;
  r.dq_rotated = false;  // the launcher decides (common/dq_schedule.h: it needs the device's residency)
  r.accumulate_dkv = plan.accumulate_dkv();
  return r;
}

}  // namespace flashtrain::cuda::sm80
