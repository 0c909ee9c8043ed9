// The CUDA backend's entry points (src/api/backends.h): says why it cannot run a problem, and
// runs the sm80 (mma.sync) kernels on the caller's stream. Backward allocates its workspace
// stream-ordered when the caller gave none.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "../api/backends.h"
#include "common/built_hdims.h"
#include "common/cuda_check.h"
#include "sm80/launch.h"
#include "sm90/launch.h"

namespace flashtrain::cuda {
namespace {

// mma.sync with bf16 inputs, cp.async and ldmatrix all need sm80.
constexpr int kMinComputeMajor = 8;
// 128-bit global loads and stores: pointers and the batch/sequence/head strides of every
// tensor must be multiples of 16 bytes.
constexpr int64_t kVectorBytes = 16;

std::string supported_pairs() {
  std::string s;
  for (const HeadDimPair& d : kSupportedHeadDims) {
    if (!s.empty()) s += ", ";
    s += d.qk == d.v ? std::to_string(d.qk) : std::to_string(d.qk) + "/" + std::to_string(d.v);
  }
  return s;
}

std::string dtype_reason(const Problem& p) {
  if (p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16) return {};
  return detail::concat("cuda: dtype ", dtype_name(p.dtype),
                        " is not supported on CUDA (float16 and bfloat16 are; the CPU backend runs float32)");
}

std::string head_dim_reason(const Problem& p) {
  if (!head_dims_supported(p.dim_qk, p.dim_v))
    return detail::concat("cuda: head dims (Dqk=", p.dim_qk, ", Dv=", p.dim_v,
                          ") are not supported (supported Dqk[/Dv]: ", supported_pairs(), ")");
  if (!head_dim_built(p.dim_qk))
    return detail::concat("cuda: head dim ", p.dim_qk, " is not built (built: ", FLASHTRAIN_HDIMS_BUILT,
                          "); rebuild with -DFLASHTRAIN_HDIMS including ", p.dim_qk);
  return {};
}

// Device placement and capability; empty when the tensors are on the current device and it is sm80+.
std::string device_reason(const Problem& p) {
  if (p.device != Device::kCUDA)
    return detail::concat("cuda: tensors are on ", device_name(p.device), ", the CUDA backend needs CUDA tensors");
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls are not blamed for it
    return detail::concat("cuda: no usable CUDA device (cudaGetDeviceCount: ",
                          count_err == cudaSuccess ? "0 devices" : cudaGetErrorString(count_err), ")");
  }
  int current = -1;
  FT_CUDA_CHECK(cudaGetDevice(&current), "cuda: cudaGetDevice");
  if (p.device_index != current)
    return detail::concat("cuda: tensors are on cuda:", p.device_index, " but the current device is cuda:", current,
                          " (set it with cudaSetDevice / torch.cuda.set_device)");
  int major = 0, minor = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current), "cuda: reading the compute capability");
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current), "cuda: reading the compute capability");
  if (major < kMinComputeMajor)
    return detail::concat("cuda: GPU compute capability ", major, ".", minor, " < ", kMinComputeMajor,
                          ".0 (the kernels use sm80 mma.sync, cp.async and ldmatrix)");
  return {};
}

// Alignment of one tensor for 128-bit accesses; empty when fine or not given.
std::string alignment_reason(const char* name, const TensorView& t, const Strides3& s, DType dtype) {
  if (!t.defined() || t.data == nullptr) return {};
  const int64_t elems = kVectorBytes / static_cast<int64_t>(dtype_size(dtype));
  std::string r;
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorBytes != 0)
    r = detail::concat("cuda: ", name, " data pointer ", t.data, " is not ", kVectorBytes, "-byte aligned");
  if (s.batch % elems != 0 || s.seq % elems != 0 || s.head % elems != 0)
    r += detail::concat(r.empty() ? "" : "\n", "cuda: ", name, " strides (batch ", s.batch, ", seq ", s.seq, ", head ",
                        s.head, ") must be multiples of ", elems, " elements (", kVectorBytes, " bytes)");
  return r;
}

// Kernels index rows and heads with 32-bit ints.
std::string size_reason(const Problem& p) {
  constexpr int64_t kMaxInt = INT32_MAX;
  if (p.total_q > kMaxInt || p.total_k > kMaxInt || p.max_seqlen_q > kMaxInt || p.max_seqlen_k > kMaxInt)
    return detail::concat("cuda: sequence rows must be < 2^31 (total_q ", p.total_q, ", total_k ", p.total_k, ")");
  return {};
}

void append(std::string& all, const std::string& reason) {
  if (reason.empty()) return;
  if (!all.empty()) all += "\n";
  all += reason;
}

}  // namespace

std::string refusal(const Problem& p) {
  std::string r;
  append(r, dtype_reason(p));
  append(r, head_dim_reason(p));
  append(r, device_reason(p));
  if (p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16) {
    append(r, alignment_reason("q", p.q, p.sq, p.dtype));
    append(r, alignment_reason("k", p.k, p.sk, p.dtype));
    append(r, alignment_reason("v", p.v, p.sv, p.dtype));
    append(r, alignment_reason("out", p.out, p.so, p.dtype));
    append(r, alignment_reason("dout", p.dout, p.sdo, p.dtype));
    append(r, alignment_reason("dq", p.dq, p.sdq, p.dtype));
    append(r, alignment_reason("dk", p.dk, p.sdk, p.dtype));
    append(r, alignment_reason("dv", p.dv, p.sdv, p.dtype));
  }
  append(r, size_reason(p));
  return r;
}

// FLASHTRAIN_DISABLE_SM90 (a diagnostic): set, the sm80 path runs everything; =fwd or =bwd, only
// that pass (e.g. to tell whether an error comes from the forward's or the backward's kernels).
static bool sm90_disabled_for(const char* pass) {
  const char* v = std::getenv("FLASHTRAIN_DISABLE_SM90");
  if (v == nullptr) return false;
  const std::string value(v);
  return (value != "fwd" && value != "bwd") || value == pass;
}

// Hopper runs the sm90 (wgmma + TMA) forward for what it supports; everything else, and any GPU
// with FLASHTRAIN_DISABLE_SM90 set (to anything but "bwd"), runs the sm80 path. FLASHTRAIN_DEBUG=1
// prints why sm90 was refused.
void forward(const Problem& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  static const bool sm90_disabled = sm90_disabled_for("fwd");
  static const bool debug = std::getenv("FLASHTRAIN_DEBUG") != nullptr;
  if (!sm90_disabled) {
    const std::string why = p.report != nullptr
                                ? "sm90: telemetry (AttentionOptions::report) is filled by the sm80 path"
                                : sm90::refusal(p);
    if (why.empty()) return sm90::run_fwd(p, stream);
    if (debug) std::fprintf(stderr, "flashtrain: forward on the sm80 path: %s\n", why.c_str());
  }
  sm80::run_fwd(p, stream);
}

namespace {

// Hopper runs the sm90 backward main kernel for what it supports (between the shared sm80
// preprocess and postprocess, same workspace); everything else, and FLASHTRAIN_DISABLE_SM90 set
// to anything but "fwd", runs the sm80 path.
void run_bwd_kernels(const Problem& p, void* workspace, cudaStream_t stream) {
  static const bool sm90_disabled = sm90_disabled_for("bwd");
  static const bool debug = std::getenv("FLASHTRAIN_DEBUG") != nullptr;
  if (!sm90_disabled) {
    const std::string why = sm90::bwd_refusal(p);
    if (why.empty()) return sm90::run_bwd(p, workspace, stream);
    if (debug) std::fprintf(stderr, "flashtrain: backward on the sm80 path: %s\n", why.c_str());
  }
  sm80::run_bwd(p, workspace, stream);
}

// The normal pass, then the overflow guard's safe pass (DESIGN.md §3), which is always enqueued:
// its kernels read the flag the normal pass raised and exit at once when it is clear, so the
// guard adds a few empty launches and no synchronisation. A report request takes the sm80 main
// kernel, which records max |dS| (as forward() does for its telemetry), and reads the guard's
// words back, synchronising.
//
// Precision::kHigh runs the sm80 safe pass alone instead, on every GPU and head dim (sm90 too):
// its main kernel splits P and dS into hi + lo 16-bit halves for the GEMMs (sm80/bwd_safe_scale.h),
// and run_bwd_safe, given kHigh, prepares D and lse itself and runs unconditionally. It never
// raises the guard's flag and is not followed by another safe pass, so the report counts no rerun.
void run_bwd_guarded(const Problem& p, void* workspace, cudaStream_t stream) {
  static const bool debug = std::getenv("FLASHTRAIN_DEBUG") != nullptr;
  if (p.precision == Precision::kHigh) {
    if (debug) std::fprintf(stderr, "flashtrain: backward on the sm80 split pass: precision=high\n");
    sm80::run_bwd_safe(p, workspace, stream);
  } else {
    if (p.report != nullptr) {
      sm80::run_bwd(p, workspace, stream);
    } else {
      run_bwd_kernels(p, workspace, stream);
    }
#ifndef FLASHTRAIN_GUARD_COMPILED_OUT
    sm80::run_bwd_safe(p, workspace, stream);
#endif
  }
  if (p.report != nullptr) sm80::read_bwd_numerics(p, workspace, stream);
}

}  // namespace

void backward(const Problem& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const std::size_t needed = sm80::bwd_workspace_size(p);
  void* workspace = p.workspace;
  if (workspace != nullptr) {
    FT_CHECK(p.workspace_bytes >= needed, "cuda backward: workspace_bytes is ", p.workspace_bytes,
             " but this call needs ", needed, " (flashtrain::backward_workspace_size)");
    run_bwd_guarded(p, workspace, stream);
    return;
  }
  if (needed > 0)
    FT_CUDA_CHECK(cudaMallocAsync(&workspace, needed, stream), "cuda backward: allocating ", needed,
                  " bytes of workspace");
  try {
    run_bwd_guarded(p, workspace, stream);
  } catch (...) {
    if (workspace != nullptr) cudaFreeAsync(workspace, stream);
    throw;
  }
  if (workspace != nullptr) FT_CUDA_CHECK(cudaFreeAsync(workspace, stream), "cuda backward: freeing the workspace");
}

std::size_t backward_workspace_size(const Problem& p) { return sm80::bwd_workspace_size(p); }

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace flashtrain::cuda
