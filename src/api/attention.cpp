// Public entry points: validate, choose a backend (saying why others were refused), run it.
#include "flashtrain/attention.h"

#include <cmath>
#include <sstream>

#include "backends.h"
#include "validate.h"

namespace flashtrain {
namespace {

std::string cpu_refusal(const Problem& p) {
  if (p.device != Device::kCPU)
    return detail::concat("cpu: tensors are on ", device_name(p.device), ":", p.device_index,
                          ", the CPU backend reads host memory");
  return {};
}

std::string reference_refusal(const Problem& p) {
  if (p.device != Device::kCPU)
    return detail::concat("reference: tensors are on ", device_name(p.device), ":", p.device_index,
                          ", the reference backend reads host memory");
  return {};
}

std::string cuda_varlen_refusal(const Problem& p) {
  if (p.device == Device::kCUDA && p.varlen && (p.max_seqlen_q <= 0 || p.max_seqlen_k <= 0))
    return detail::concat("cuda: varlen needs max_seqlen_q and max_seqlen_k > 0 (got ",
                          p.max_seqlen_q, " and ", p.max_seqlen_k,
                          "); reading cu_seqlens from the GPU would synchronise");
  return {};
}

std::string refusal_of(Backend b, const Problem& p) {
  switch (b) {
    case Backend::kCPU: return cpu_refusal(p);
    case Backend::kReference: return reference_refusal(p);
    case Backend::kCUDA: {
      std::string r = cuda::refusal(p);
      const std::string v = cuda_varlen_refusal(p);
      if (!v.empty()) r += (r.empty() ? "" : "\n") + v;
      return r;
    }
    case Backend::kAuto: break;
  }
  return {};
}

BackendChoice choose(const Problem& p, Backend requested) {
  if (requested != Backend::kAuto) {
    const std::string why = refusal_of(requested, p);
    if (!why.empty())
      throw Error(detail::concat("flashtrain: backend ", backend_name(requested),
                                 " cannot run this call:\n  ", why));
    return {requested, {}};
  }
  const Backend order[] = {p.device == Device::kCPU ? Backend::kCPU : Backend::kCUDA};
  std::string refused;
  for (Backend b : order) {
    const std::string why = refusal_of(b, p);
    if (why.empty()) return {b, refused};
    refused += why + "\n";
  }
  throw Error("flashtrain: no backend can run this call:\n  " + refused);
}

void record_forward_call(const Problem& p) {
  if (p.report) ++p.report->forward_calls;
}

}  // namespace

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kCPU: return "cpu";
    case Backend::kCUDA: return "cuda";
    case Backend::kReference: return "reference";
  }
  return "unknown";
}

bool cuda_available() { return cuda::device_available(); }

BackendChoice choose_backend(const TensorView& q, const TensorView& k, const TensorView& v,
                             const AttentionOptions& options) {
  return choose(make_input_problem(q, k, v, options), options.backend);
}

void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
             const TensorView& lse, const AttentionOptions& options) {
  Problem p = make_forward_problem(q, k, v, out, lse, options);
  const BackendChoice choice = choose(p, options.backend);
  if (options.nonfinite_inputs == NonFiniteInputs::kCheck) check_finite_inputs(p, false);
  record_forward_call(p);
  switch (choice.backend) {
    case Backend::kCPU: cpu::forward(p); break;
    case Backend::kCUDA: cuda::forward(p); break;
    case Backend::kReference: reference::forward(p); break;
    case Backend::kAuto: break;
  }
}

void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              const TensorView& lse, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv, const AttentionOptions& options) {
  Problem p = make_backward_problem(q, k, v, out, lse, dout, dq, dk, dv, options);
  const BackendChoice choice = choose(p, options.backend);
  if (options.nonfinite_inputs == NonFiniteInputs::kCheck) check_finite_inputs(p, true);
  if (p.report) ++p.report->backward_calls;
  switch (choice.backend) {
    case Backend::kCPU: cpu::backward(p); break;
    case Backend::kCUDA: cuda::backward(p); break;
    case Backend::kReference: reference::backward(p); break;
    case Backend::kAuto: break;
  }
}

std::size_t backward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const AttentionOptions& options) {
  return backward_workspace_size(q, k, v, TensorView{}, options);
}

std::size_t backward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& dq, const AttentionOptions& options) {
  Problem p = make_input_problem(q, k, v, options);
  p.dq = dq;  // only its memory layout matters here; backward() validates it
  return choose(p, options.backend).backend == Backend::kCUDA ? cuda::backward_workspace_size(p) : 0;
}

}  // namespace flashtrain
