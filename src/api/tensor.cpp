#include "flashtrain/tensor.h"

#include <sstream>

#include "flashtrain/error.h"

namespace flashtrain {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kInt32: return "int32";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64: return 8;
  }
  return 0;
}

const char* device_name(Device device) { return device == Device::kCPU ? "cpu" : "cuda"; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return ndim > 0 ? n : 0;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

const char* TensorView::byte_begin() const {
  int64_t lo = 0;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] > 0 && stride[d] < 0) lo += (shape[d] - 1) * stride[d];
  return static_cast<const char*>(data) + lo * static_cast<int64_t>(dtype_size(dtype));
}

const char* TensorView::byte_end() const {
  if (numel() == 0) return byte_begin();
  int64_t hi = 0;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] > 0 && stride[d] > 0) hi += (shape[d] - 1) * stride[d];
  return static_cast<const char*>(data) + (hi + 1) * static_cast<int64_t>(dtype_size(dtype));
}

std::string TensorView::shape_string() const {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << ']';
  return os.str();
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device, int device_index) {
  FT_CHECK(shape.size() >= 1 && shape.size() <= static_cast<std::size_t>(kMaxDims),
           "TensorView: rank must be 1..", kMaxDims, ", got ", shape.size());
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device,
                               int device_index) {
  FT_CHECK(shape.size() == strides.size(), "TensorView: shape has ", shape.size(),
           " dims but strides has ", strides.size());
  TensorView t = contiguous(data, dtype, shape, device, device_index);
  int d = 0;
  for (int64_t s : strides) t.stride[d++] = s;
  return t;
}

}  // namespace flashtrain
