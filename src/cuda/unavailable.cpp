// The CUDA backend's entry points in a build without CUDA (FLASHTRAIN_CUDA=OFF): it refuses
// every problem with the reason, and its runners are unreachable through the API.
#include "../api/backends.h"

namespace flashtrain::cuda {
namespace {
constexpr const char* kNotBuilt = "cuda: flashtrain was built without CUDA (FLASHTRAIN_CUDA=OFF)";
}

std::string refusal(const Problem&) { return kNotBuilt; }

void forward(const Problem&) { throw Error(kNotBuilt); }

void backward(const Problem&) { throw Error(kNotBuilt); }

std::size_t backward_workspace_size(const Problem&) { throw Error(kNotBuilt); }

bool device_available() { return false; }

int64_t first_nonfinite(const TensorView&, void*, double*) { throw Error(kNotBuilt); }

}  // namespace flashtrain::cuda
