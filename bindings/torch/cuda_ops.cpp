// The CUDA implementation of flashtrain::fwd / bwd: runs on q's device and torch's current
// stream, and takes backward's workspace from torch's caching allocator.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "attention_ops.h"

namespace flashtrain::torch_binding {
namespace {

class CudaScope {
 public:
  // q on another device is left to the library's validation, which names it.
  explicit CudaScope(const at::Tensor& q)
      : guard_(q.is_cuda() ? c10::optional<c10::Device>(q.device()) : c10::nullopt) {}
  ExecutionContext context() const {
    ExecutionContext c;
    c.stream = c10::cuda::getCurrentCUDAStream().stream();
    c.torch_workspace = true;
    return c;
  }

 private:
  c10::cuda::OptionalCUDAGuard guard_;
};

}  // namespace
}  // namespace flashtrain::torch_binding

FLASHTRAIN_TORCH_LIBRARY_IMPL(FLASHTRAIN_OP_NS, CUDA, m) {
  using namespace flashtrain::torch_binding;
  m.impl("fwd", &forward_kernel<CudaScope>);
  m.impl("bwd", &backward_kernel<CudaScope>);
  m.impl("backend", &backend_kernel<CudaScope>);
}
