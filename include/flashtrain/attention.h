// flashtrain public API: attention forward and recompute-backward.
//
// Layout (DESIGN.md §2), like FlashAttention:
//   dense : q [B, Sq, Hq, Dqk], k [B, Sk, Hk, Dqk], v [B, Sk, Hk, Dv], out [B, Sq, Hq, Dv],
//           lse float32 [B, Hq, Sq]
//   varlen: q [total_q, Hq, Dqk], k [total_k, Hk, Dqk], v [total_k, Hk, Dv], out [total_q, Hq, Dv],
//           lse float32 [Hq, total_q], with AttentionOptions::cu_seqlens_q/k int32 [B + 1].
// The last dim of every tensor is contiguous; other strides are free. Hq % Hk == 0 (GQA/MQA).
//
// Score of query row i and key column j of one (batch, head), with off the alignment offset
// (Sk - Sq for kBottomRight, 0 for kTopLeft):
//   s = softmax_scale * dot(q_i, k_j)
//   s = softcap * tanh(s / softcap)             if softcap > 0
//   s = s - alibi_slope[h] * |i + off - j|      if alibi_slopes given
//   masked (s = -inf) when causal and j > i + off, or j < i + off - window_left (left >= 0),
//   or j > i + off + window_right (right >= 0).
// P = softmax(s) per row, lse = log(sum_j exp(s_ij)) (natural log), out = dropout(P) @ v.
// A row that sees no key gives out = 0, lse = -inf and zero gradients.
//
// Dropout (p > 0): element (b, h, i, j), with b the batch index and i, j positions inside that
// sequence, is dropped iff philox_keep(seed, offset, b * Hq + h, i, j, p) is false
// (src/common/philox.h states the exact bits); kept elements are scaled by 1 / (1 - p).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "flashtrain/error.h"
#include "flashtrain/numerics.h"
#include "flashtrain/tensor.h"

namespace flashtrain {

enum class Backend : int { kAuto = 0, kCPU = 1, kCUDA = 2, kReference = 3 };
enum class CausalAlign : int {
  kBottomRight = 0,  // FlashAttention convention: last query row sees the last key
  kTopLeft = 1,      // torch SDPA is_causal: query row i sees keys 0..i
};
// CPU forward, bf16 inputs with kDefault: FLASHTRAIN_CPU_AMX=1 in the environment runs its two
// tile products on Intel AMX (exact bf16 products summed in fp32, P rounded to bf16), where the
// CPU and kernel allow it and the fp32 products otherwise. Opt-in (tested on an AMX host).
//
// Precision::kHigh in backward: the CPU backend keeps P and dS in fp32. The CUDA backend (every GPU
// and head dim, Hopper included) runs the sm80 backward kernel of the overflow guard's safe pass
// as its only pass: P and dS are split into two 16-bit halves, hi = round(x) and
// lo = round(x - hi), and the dV, dQ and dK GEMMs run on both into the same fp32 accumulators, so
// they see P and dS to about 2^-22 (fp16) / 2^-16 (bf16) relative instead of 2^-11 / 2^-8, and dS
// is scaled by exact powers of two so it never overflows fp16 (fp16 values below 2^-14 keep its
// subnormal spacing). Three of the five backward GEMMs run twice, and the Hopper (sm90) backward
// kernel is never used, so it is slower than kDefault; NumericsReport counts no safe-mode rerun.
// The correction term D = rowsum(dO * out) would carry the rounding of `out` to the input dtype
// (on large-dO fp16 inputs the dominant dQ / dK error), so kHigh recomputes it as
// sum_j P_ij dL/dP_ij from q, k, v, dO and lse (a tensor-core pass shaped like the forward: two
// GEMMs, fp32 sums). That pass also normalises each recomputed row of P to a unit sum (D and the
// P of the GEMMs alike): lse, rounded in fp32 at the magnitude of the logits, leaves rows summing
// to 1 +- ~1e-3 at logits ~1e3, which the cancellations in dS and dK amplify. Measured on the H200
// (python -m flashtrain.doctor): dQ / dK error at most 1.13x that of attention computed in fp32
// (torch's math backend) on every stress case, and below it with logits ~1e3. The CUDA forward
// ignores it.
enum class Precision : int {
  kDefault = 0,  // P and dS rounded to the input dtype before the GEMMs (FlashAttention's choice)
  kHigh = 1,     // P and dS kept in higher precision in backward (see above)
};

struct AttentionOptions {
  std::optional<double> softmax_scale;  // default 1 / sqrt(Dqk); must be finite and > 0
  bool causal = false;
  CausalAlign align = CausalAlign::kBottomRight;  // alignment of the causal/window diagonal
  int64_t window_left = -1;   // -1 = unbounded
  int64_t window_right = -1;  // -1 = unbounded (causal forces 0)
  double softcap = 0.0;       // 0 = off; otherwise finite and > 0
  TensorView alibi_slopes;    // optional float32 [Hq] or [B, Hq]
  double dropout_p = 0.0;     // in [0, 1)
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool deterministic = false;  // bitwise-identical gradients run to run
  Precision precision = Precision::kDefault;

  // Varlen (q is rank 3): int32 [B + 1] prefix sums, starting at 0, non-decreasing.
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_k;
  int64_t max_seqlen_q = 0;  // 0: computed from cu_seqlens (CPU) / required on CUDA
  int64_t max_seqlen_k = 0;

  Backend backend = Backend::kAuto;
  NonFiniteInputs nonfinite_inputs = NonFiniteInputs::kPropagate;
  // Telemetry: non-null turns it on. On CUDA a call with a report synchronises its stream and
  // runs the sm80 kernels, which collect it; without one nothing is read back (the backward's
  // overflow guard still runs, on the device).
  NumericsReport* report = nullptr;

  // Execution context (CUDA): stream (cudaStream_t) and an optional caller workspace.
  void* stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Computes out and lse. Throws flashtrain::Error on bad input, naming the argument and values.
void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
             const TensorView& lse, const AttentionOptions& options = {});

// Computes dq, dk, dv from the forward's inputs, out and lse, and the upstream gradient dout.
void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              const TensorView& lse, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv, const AttentionOptions& options = {});

// Bytes of workspace backward() needs for these shapes on the chosen backend (0 on the CPU).
// When options.workspace is null, backward() allocates it on options.stream itself.
std::size_t backward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const AttentionOptions& options = {});
// The same for a backward that writes its dq into `dq`: when dq is one dense, 16-byte aligned
// block, the CUDA backend keeps its per-row statistics in it until the gradient is written, and
// needs 8 bytes per query row and head less than the query above, which cannot assume that.
std::size_t backward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& dq, const AttentionOptions& options = {});

// The backend kAuto picks for these inputs, and a readable line for every backend refused.
struct BackendChoice {
  Backend backend;
  std::string refused;  // "cuda: head dim 320 is not built (built: 64, 128)\n..." or empty
};
BackendChoice choose_backend(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options = {});

const char* backend_name(Backend backend);
bool cuda_available();  // compiled with CUDA and a device is present

}  // namespace flashtrain
