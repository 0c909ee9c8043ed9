// TensorView: a non-owning view of a strided tensor (pointer, dtype, device, shape, strides).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace flashtrain {

enum class DType : int { kFloat16 = 0, kBFloat16 = 1, kFloat32 = 2, kInt32 = 3, kFloat64 = 4 };
enum class Device : int { kCPU = 0, kCUDA = 1 };

const char* dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);
const char* device_name(Device device);

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;
  int ndim = 0;                       // 0 means "not given"
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};  // in elements, not bytes

  bool defined() const { return ndim > 0; }
  int64_t size(int dim) const { return shape[dim < 0 ? dim + ndim : dim]; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Byte range [begin, end) that the view can touch; used for aliasing checks.
  const char* byte_begin() const;
  const char* byte_end() const;
  std::string shape_string() const;  // "[2, 128, 8, 64]"

  // A contiguous (row-major) view of `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCPU, int device_index = 0);
  // A view with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = Device::kCPU,
                            int device_index = 0);
};

}  // namespace flashtrain
