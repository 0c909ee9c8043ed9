// Shared helpers of the GoogleTest suite: the backends and dtypes present on this machine, and
// assertion helpers around the DESIGN.md §4 case runner (src/reference/check.h).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "flashtrain/attention.h"
#include "reference/check.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtrain::testing {

// Sets environment variable `name` (unsets it for nullptr) for one scope and restores what was
// there: the backends read their FLASHTRAIN_* knobs on every call, so a test can pick a path.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

// Backends under test: the CPU always, CUDA when built and a device is present.
inline std::vector<Backend> backends_present() {
  std::vector<Backend> b = {Backend::kCPU};
  if (cuda_available()) b.push_back(Backend::kCUDA);
  return b;
}

// Whether the current CUDA device is compute capability 9.0, where the sm90 kernels run (tests that
// call them directly skip elsewhere).
inline bool hopper_present() {
#ifdef FLASHTRAIN_WITH_CUDA
  if (!cuda_available()) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// One backend with one input dtype. fp32 runs on the CPU only (DESIGN.md §2).
struct Target {
  Backend backend;
  DType dtype;
};

inline std::vector<Target> targets_present() {
  std::vector<Target> t;
  for (Backend b : backends_present()) {
    t.push_back({b, DType::kFloat16});
    t.push_back({b, DType::kBFloat16});
    if (b == Backend::kCPU) t.push_back({b, DType::kFloat32});
  }
  return t;
}

// gtest prints the parameter in test listings (and ctest names): "cpu_bf16".
inline void PrintTo(const Target& t, std::ostream* os) {
  *os << backend_name(t.backend) << "_" << check::dtype_short_name(t.dtype);
}

inline std::string target_name(const ::testing::TestParamInfo<Target>& info) {
  return std::string(backend_name(info.param.backend)) + "_" +
         check::dtype_short_name(info.param.dtype);
}
inline std::string backend_param_name(const ::testing::TestParamInfo<Backend>& info) {
  return backend_name(info.param);
}

// A dense spec with the given sizes; options default.
inline check::CaseSpec dense_spec(const std::string& name, int64_t batch, int64_t sq, int64_t sk,
                                  int64_t hq, int64_t hk, int64_t dqk, int64_t dv, DType dtype) {
  check::CaseSpec s;
  s.name = name;
  s.batch = batch;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.heads_q = hq;
  s.heads_k = hk;
  s.dim_qk = dqk;
  s.dim_v = dv;
  s.dtype = dtype;
  return s;
}

// The head dims the CUDA build instantiated (FLASHTRAIN_HDIMS, e.g. "64,128"; "" without CUDA).
inline const char* cuda_head_dims_built() {
#ifdef FLASHTRAIN_HDIMS_BUILT
  return FLASHTRAIN_HDIMS_BUILT;
#else
  return "";
#endif
}

// Whether the CUDA build instantiated head dim d: GPU cases of head dims the build left out are
// skipped, saying so, instead of failing on the backend's refusal.
inline bool cuda_head_dim_built(int64_t d) {
  const std::string built = std::string(",") + cuda_head_dims_built() + ",";
  return built.find("," + std::to_string(d) + ",") != std::string::npos;
}

// Those of `dims` the CUDA build instantiated, in order (a test looping over head dims skips when
// none is left).
inline std::vector<int64_t> cuda_head_dims_built_of(std::initializer_list<int64_t> dims) {
  std::vector<int64_t> built;
  for (int64_t d : dims)
    if (cuda_head_dim_built(d)) built.push_back(d);
  return built;
}

// Skips the test, saying why, when it would run `spec` on the CUDA backend of a build that left
// the spec's head dim out of FLASHTRAIN_HDIMS (the backend refuses such a call). In a helper
// function it returns from the helper only: call it before anything else the test checks.
#define FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(spec, backend)                                          \
  if ((backend) == ::flashtrain::Backend::kCUDA &&                                                    \
      !::flashtrain::testing::cuda_head_dim_built((spec).dim_qk))                                     \
  GTEST_SKIP() << "head dim " << (spec).dim_qk << " is not in FLASHTRAIN_HDIMS ("                     \
               << ::flashtrain::testing::cuda_head_dims_built() << ")"

// Runs the case on `backend` and asserts the §4 rule for every output, every element written
// and nothing written outside the output views; the failure message carries all numbers.
inline void expect_case_passes(const check::CaseSpec& spec, Backend backend) {
  const check::CaseResult r = check::run_case(spec, backend);
  EXPECT_TRUE(r.pass) << spec.name << " on " << backend_name(backend) << " "
                      << check::dtype_short_name(spec.dtype) << ":\n" << r.describe();
}

}  // namespace flashtrain::testing
