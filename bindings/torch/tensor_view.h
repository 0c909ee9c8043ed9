// at::Tensor -> flashtrain::TensorView, naming the argument when a tensor cannot be described.
#pragma once
#include <ATen/ATen.h>

#include "flashtrain/tensor.h"

namespace flashtrain::torch_binding {

// A view of `t` (an undefined tensor gives an undefined view). Throws flashtrain::Error naming
// `name` when t's rank, dtype or device has no TensorView counterpart.
TensorView to_view(const at::Tensor& t, const char* name);
TensorView to_view(const c10::optional<at::Tensor>& t, const char* name);

}  // namespace flashtrain::torch_binding
