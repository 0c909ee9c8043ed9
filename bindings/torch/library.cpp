// TORCH_LIBRARY(flashtrain) (or FLASHTRAIN_TORCH_OP_NAMESPACE): the operator schemas and their CPU
// implementation.
// The CUDA implementation is registered by cuda_ops.cpp when torch has CUDA.
#include <torch/library.h>
#include <torch/version.h>

#include "attention_ops.h"

namespace flashtrain::torch_binding {
namespace {

struct HostScope {
  explicit HostScope(const at::Tensor&) {}
  ExecutionContext context() const { return {}; }
};

}  // namespace
}  // namespace flashtrain::torch_binding

// torch >= 2.2 knows pt2_compliant_tag: it tells torch.compile the ops have fake registrations
// (python/flashtrain/ops.py) and are safe to trace.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define FLASHTRAIN_OP_TAGS , {at::Tag::pt2_compliant_tag}
#else
#define FLASHTRAIN_OP_TAGS
#endif

// Every operator is defined without a kernel and implemented per dispatch key: CPU here, CUDA in
// cuda_ops.cpp (under a device guard on q's device and torch's current stream).
FLASHTRAIN_TORCH_LIBRARY(FLASHTRAIN_OP_NS, m) {
  using namespace flashtrain::torch_binding;
  m.def(kForwardSchema FLASHTRAIN_OP_TAGS);
  m.def(kBackwardSchema FLASHTRAIN_OP_TAGS);
  m.def(kBackendSchema);
}

FLASHTRAIN_TORCH_LIBRARY_IMPL(FLASHTRAIN_OP_NS, CPU, m) {
  using namespace flashtrain::torch_binding;
  m.impl("fwd", &forward_kernel<HostScope>);
  m.impl("bwd", &backward_kernel<HostScope>);
  m.impl("backend", &backend_kernel<HostScope>);
}

// backend only reads metadata and answers with a string. On devices without a kernel of their own
// (no CUDA ops in this build, meta, mps, ...) it still runs, so the caller gets the library's
// reasons ("q is on device mps; flashtrain runs on cpu and cuda") instead of the dispatcher's
// "no kernel" error. This replaces the former catch-all (CompositeImplicitAutograd) kernel, which
// also served CUDA tensors without a device guard.
FLASHTRAIN_TORCH_LIBRARY_IMPL(FLASHTRAIN_OP_NS, CompositeExplicitAutograd, m) {
  using namespace flashtrain::torch_binding;
  m.impl("backend", &backend_op);
}
