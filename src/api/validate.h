// Input validation: turns the caller's tensors and options into a resolved Problem, or throws
// flashtrain::Error listing every rule that failed, each naming the argument and the values seen.
#pragma once
#include "problem.h"

namespace flashtrain {

// Inputs and options only (no outputs): for backend choice and workspace queries.
Problem make_input_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                           const AttentionOptions& options);

Problem make_forward_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const TensorView& lse,
                             const AttentionOptions& options);

Problem make_backward_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse, const TensorView& dout,
                              const TensorView& dq, const TensorView& dk, const TensorView& dv,
                              const AttentionOptions& options);

// Throws Error naming the tensor and the first non-finite element (options.nonfinite_inputs ==
// kCheck). Host tensors only; CUDA tensors are scanned by the CUDA backend.
void check_finite_inputs(const Problem& p, bool backward);

}  // namespace flashtrain
