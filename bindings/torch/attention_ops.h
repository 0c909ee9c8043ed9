// The flashtrain::fwd / flashtrain::bwd operators: allocate outputs with torch, fill
// AttentionOptions, call flashtrain::forward/backward. The device-specific part (device guard,
// stream, workspace) is a DeviceScope: HostScope here, CudaScope in cuda_scope.h.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <tuple>

// The torch.ops namespace the operators register under: flashtrain, unless CMake's
// FLASHTRAIN_TORCH_OP_NAMESPACE names another (a second build loaded next to this one).
// TORCH_LIBRARY and TORCH_LIBRARY_IMPL paste their namespace argument unexpanded, so these
// wrappers expand FLASHTRAIN_OP_NS first.
#ifndef FLASHTRAIN_OP_NS
#define FLASHTRAIN_OP_NS flashtrain
#endif
#define FLASHTRAIN_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define FLASHTRAIN_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace flashtrain::torch_binding {

// What the device-specific registration hands to the shared operator bodies.
struct ExecutionContext {
  void* stream = nullptr;         // cudaStream_t on CUDA; null on the CPU
  bool torch_workspace = false;   // allocate backward's workspace from torch's allocator
};

// The operators' schemas, shared by the TORCH_LIBRARY definition and the documentation.
extern const char* const kForwardSchema;
extern const char* const kBackwardSchema;
extern const char* const kBackendSchema;

// The backend flashtrain::fwd would run for these inputs ("cpu", "cuda"); throws (Python
// ValueError) with every reason when none can, e.g. a CUDA head dim that is not built.
std::string backend_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const c10::optional<at::Tensor>& cu_seqlens_q,
                       const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q,
                       int64_t max_seqlen_k, double dropout_p,
                       c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
                       int64_t window_left, int64_t window_right, double softcap,
                       const c10::optional<at::Tensor>& alibi_slopes);

std::tuple<at::Tensor, at::Tensor> forward_op(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& cu_seqlens_q, const c10::optional<at::Tensor>& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double dropout_p,
    c10::optional<double> softmax_scale, bool causal, bool causal_top_left, int64_t window_left,
    int64_t window_right, double softcap, const c10::optional<at::Tensor>& alibi_slopes,
    const c10::optional<at::Tensor>& rng_state, const c10::optional<at::Tensor>& report,
    const ExecutionContext& context);

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& cu_seqlens_q,
    const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double dropout_p, c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
    int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<at::Tensor>& alibi_slopes, const c10::optional<at::Tensor>& rng_state,
    bool deterministic, const c10::optional<at::Tensor>& report, int64_t precision,
    const ExecutionContext& context);

// Kernel functions with the exact schema signatures, for m.impl(). DeviceScope is constructed
// from q for the duration of the call and provides context().
template <typename DeviceScope>
std::tuple<at::Tensor, at::Tensor> forward_kernel(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& cu_seqlens_q, const c10::optional<at::Tensor>& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double dropout_p,
    c10::optional<double> softmax_scale, bool causal, bool causal_top_left, int64_t window_left,
    int64_t window_right, double softcap, const c10::optional<at::Tensor>& alibi_slopes,
    const c10::optional<at::Tensor>& rng_state, const c10::optional<at::Tensor>& report) {
  const DeviceScope scope(q);
  return forward_op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                    softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                    alibi_slopes, rng_state, report, scope.context());
}

// backend_op on the tensors' device: the CUDA scope makes q's device current, as for fwd, so
// the answer is the one fwd would give (the CUDA backend refuses tensors off the current device).
template <typename DeviceScope>
std::string backend_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const c10::optional<at::Tensor>& cu_seqlens_q,
                           const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q,
                           int64_t max_seqlen_k, double dropout_p,
                           c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
                           int64_t window_left, int64_t window_right, double softcap,
                           const c10::optional<at::Tensor>& alibi_slopes) {
  const DeviceScope scope(q);
  return backend_op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                    softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                    alibi_slopes);
}

template <typename DeviceScope>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_kernel(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& cu_seqlens_q,
    const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double dropout_p, c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
    int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<at::Tensor>& alibi_slopes, const c10::optional<at::Tensor>& rng_state,
    bool deterministic, const c10::optional<at::Tensor>& report, int64_t precision) {
  const DeviceScope scope(q);
  return backward_op(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, dropout_p, softmax_scale, causal, causal_top_left, window_left,
                     window_right, softcap, alibi_slopes, rng_state, deterministic, report,
                     precision, scope.context());
}

}  // namespace flashtrain::torch_binding
