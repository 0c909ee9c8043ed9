// The entry points each backend implements. Called only from src/api/attention.cpp after
// validation; each receives a fully resolved Problem.
#pragma once
#include <cstddef>
#include <string>

#include "problem.h"

namespace flashtrain {

namespace reference {
// Naive attention with the full score matrix. kFloat64 is the ground truth; kInputDtype rounds
// every intermediate a plain PyTorch implementation would materialise (S, P, out, dP, dS, grads)
// to the input dtype: the "naive attention in the input dtype" baseline of DESIGN.md §4.
enum class Rounding { kFloat64, kInputDtype };
void forward(const Problem& p, Rounding rounding = Rounding::kFloat64);
void backward(const Problem& p, Rounding rounding = Rounding::kFloat64);
}  // namespace reference

namespace cpu {
void forward(const Problem& p);
void backward(const Problem& p);
}  // namespace cpu

namespace cuda {
// Empty string when the CUDA backend can run p; otherwise every reason it cannot, one per line.
std::string refusal(const Problem& p);
void forward(const Problem& p);
void backward(const Problem& p);
std::size_t backward_workspace_size(const Problem& p);
bool device_available();
// Row-major index of the first non-finite element of a CUDA tensor (fp16, bf16 or fp32), -1 when
// every element is finite; *value gets the element. Runs on `stream` (cudaStream_t) and waits.
int64_t first_nonfinite(const TensorView& t, void* stream, double* value);
}  // namespace cuda

}  // namespace flashtrain
