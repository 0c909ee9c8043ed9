#include "tensor_view.h"

#include <string>

#include "flashtrain/error.h"

namespace flashtrain::torch_binding {
namespace {

DType to_dtype(at::ScalarType s, const char* name) {
  switch (s) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kInt: return DType::kInt32;
    default: break;
  }
  throw Error(detail::concat(name, " has dtype ", c10::toString(s),
                             ", which flashtrain does not take (float16, bfloat16, float32; "
                             "int32 for cu_seqlens)"));
}

Device to_device(const at::Tensor& t, const char* name) {
  if (t.device().is_cpu()) return Device::kCPU;
  if (t.device().is_cuda()) return Device::kCUDA;
  throw Error(detail::concat(name, " is on device ", t.device().str(),
                             "; flashtrain runs on cpu and cuda"));
}

}  // namespace

TensorView to_view(const at::Tensor& t, const char* name) {
  TensorView view;
  if (!t.defined()) return view;
  FT_CHECK(t.dim() >= 1 && t.dim() <= TensorView::kMaxDims, name, " has rank ", t.dim(),
           " (shape ", t.sizes(), "); flashtrain takes tensors of rank 1 to ",
           TensorView::kMaxDims);
  view.data = t.data_ptr();
  view.dtype = to_dtype(t.scalar_type(), name);
  view.device = to_device(t, name);
  view.device_index = view.device == Device::kCUDA ? t.get_device() : 0;
  view.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < view.ndim; ++d) {
    view.shape[d] = t.size(d);
    view.stride[d] = t.stride(d);
  }
  return view;
}

TensorView to_view(const c10::optional<at::Tensor>& t, const char* name) {
  return t.has_value() ? to_view(*t, name) : TensorView{};
}

}  // namespace flashtrain::torch_binding
