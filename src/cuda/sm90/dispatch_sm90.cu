// sm90::refusal / sm90::bwd_refusal say why the Hopper forward / backward cannot run a problem
// (each rule a small function naming the values seen); sm90::run_fwd / sm90::run_bwd otherwise
// run the instantiation for its dtype and head dim. Head dims not built are compiled out here.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "../common/built_hdims.h"
#include "../common/cuda_check.h"
#include "bwd_args_sm90.h"
#include "fwd_args_sm90.h"
#include "launch.h"

namespace flashtrain::cuda::sm90 {
namespace {

constexpr int kComputeMajor = 9;  // wgmma, TMA and setmaxnreg are sm_90a instructions
constexpr int kComputeMinor = 0;
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kBwdHeadDims[] = {64, 128, 256};
// TMA: the global base address and every stride but the innermost are multiples of 16 bytes.
constexpr int64_t kTmaAlignBytes = 16;
// Row and column indices inside the kernel are 32-bit; keep i + diag + window in range.
constexpr int64_t kMaxSeqlen = int64_t(1) << 30;
// Work tiles (128-row query blocks x heads x batch) are numbered with 32-bit ints.
constexpr int64_t kMaxWorkTiles = int64_t(1) << 30;

struct DeviceInfo {
  int major = -1, minor = -1;
  int num_sms = 0;
};

// Compute capability and SM count of each device, read once.
DeviceInfo device_info(int device) {
  static std::mutex mutex;
  static std::vector<DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= static_cast<int>(cache.size())) cache.resize(device + 1);
  if (cache[device].major < 0) {
    cudaDeviceProp prop{};
    FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "sm90: reading the properties of cuda:", device);
    cache[device] = DeviceInfo{prop.major, prop.minor, prop.multiProcessorCount};
  }
  return cache[device];
}

// Claim counters of the forward's dynamic tile scheduler (fwd_tile_scheduler_sm90.h), two ints
// per (device, stream): launches on one stream run in order and each leaves its counter at zero,
// so only concurrent streams need their own. Allocated and zeroed on a stream's first causal-style
// forward; nullptr (one block per tile, as before the counter) inside a graph capture - a graph
// may be replayed on any stream, beside direct launches on the stream it was captured on, which
// would share the counter - and when the allocation fails, which leaves a CUDA error cleared and
// nothing else.
int* tile_counter(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return nullptr;
  }
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, int*> counters;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, stream);
  const auto found = counters.find(key);
  if (found != counters.end()) return found->second;
  int* counter = nullptr;
  if (cudaMalloc(&counter, 2 * sizeof(int)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaMemsetAsync(counter, 0, 2 * sizeof(int), stream) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(counter);
    return nullptr;
  }
  counters.emplace(key, counter);
  return counter;
}

std::string device_reason(const Problem& p) {
  if (p.device != Device::kCUDA) return detail::concat("sm90: tensors are on ", device_name(p.device), ", not CUDA");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= p.device_index) {
    cudaGetLastError();  // clear the sticky error so later calls are not blamed for it
    return detail::concat("sm90: no CUDA device cuda:", p.device_index);
  }
  const DeviceInfo info = device_info(p.device_index);
  if (info.major != kComputeMajor || info.minor != kComputeMinor)
    return detail::concat("sm90: device is not compute capability 9.0 (cuda:", p.device_index, " is ", info.major,
                          ".", info.minor, ")");
  return {};
}

template <std::size_t kN>
std::string feature_reason(const Problem& p, const char* pass, const int (&head_dims)[kN]) {
  std::string r;
  auto add = [&r](const std::string& line) { r += (r.empty() ? "" : "\n") + line; };
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    add(detail::concat("sm90: dtype ", dtype_name(p.dtype), " not supported (float16 and bfloat16 are)"));
  if (p.varlen) add(detail::concat("sm90: varlen (cu_seqlens) not supported in ", pass, ", the sm80 path runs it"));
  if (p.dropout_p > 0.0)
    add(detail::concat("sm90: dropout (p = ", p.dropout_p, ") not supported in ", pass, ", the sm80 path runs it"));
  if (p.softcap > 0.0)
    add(detail::concat("sm90: softcap (", p.softcap, ") not supported in ", pass, ", the sm80 path runs it"));
  if (p.alibi_slopes != nullptr) add(detail::concat("sm90: ALiBi not supported in ", pass, ", the sm80 path runs it"));
  if (p.dim_qk != p.dim_v)
    add(detail::concat("sm90: Dv (", p.dim_v, ") != Dqk (", p.dim_qk, ") not supported in ", pass,
                       ", the sm80 path runs it"));
  bool dim_known = false;
  std::string dims;
  for (int d : head_dims) {
    dim_known |= p.dim_qk == d;
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  }
  if (!dim_known)
    add(detail::concat("sm90: head dim ", p.dim_qk, " not supported in ", pass, " (", dims,
                       " are), the sm80 path runs it"));
  else if (!head_dim_built(p.dim_qk))
    add(detail::concat("sm90: head dim ", p.dim_qk, " not built (built: ", FLASHTRAIN_HDIMS_BUILT, ")"));
  return r;
}

// One BSHD tensor as TMA sees it: base and the strides of dims longer than 1 must be 16-byte
// multiples (dims of length 1 never step, their stride is replaced in fwd_strides()).
std::string tma_reason(const char* name, const TensorView& t, const Strides3& s, int64_t batch, int64_t seqlen,
                       int64_t heads, DType dtype) {
  if (t.data == nullptr) return detail::concat("sm90: ", name, " has no data pointer");
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t align = kTmaAlignBytes / elem;
  std::string r;
  if (reinterpret_cast<uintptr_t>(t.data) % kTmaAlignBytes != 0)
    r = detail::concat("sm90: ", name, " data pointer ", t.data, " is not ", kTmaAlignBytes, "-byte aligned (TMA)");
  auto bad = [align](int64_t size, int64_t stride) { return size > 1 && (stride <= 0 || stride % align != 0); };
  if (bad(batch, s.batch) || bad(seqlen, s.seq) || bad(heads, s.head))
    r += detail::concat(r.empty() ? "" : "\n", "sm90: ", name, " strides (batch ", s.batch, ", seq ", s.seq, ", head ",
                        s.head, ") must be positive multiples of ", align, " elements (", kTmaAlignBytes,
                        " bytes) for TMA");
  return r;
}

std::string size_reason(const Problem& p) {
  std::string r;
  if (p.max_seqlen_q > kMaxSeqlen || p.max_seqlen_k > kMaxSeqlen)
    r = detail::concat("sm90: sequence lengths (Sq ", p.max_seqlen_q, ", Sk ", p.max_seqlen_k, ") must be <= ",
                       kMaxSeqlen);
  if (p.max_seqlen_k == 0 && p.max_seqlen_q > 0)
    r += detail::concat(r.empty() ? "" : "\n", "sm90: seqlen_k = 0 not supported (TMA needs a non-empty K), the sm80 path runs it");
  const int64_t work_tiles = (p.max_seqlen_q + kFwdMinBlockM - 1) / kFwdMinBlockM * p.heads_q * p.batch;
  if (work_tiles > kMaxWorkTiles)
    r += detail::concat(r.empty() ? "" : "\n", "sm90: ", work_tiles, " work tiles (ceil(Sq / ", kFwdMinBlockM,
                        ") * heads * batch) exceed ", kMaxWorkTiles);
  return r;
}

FwdStrides fwd_strides(const Strides3& s, int64_t batch, int64_t seqlen, int64_t heads, DType dtype) {
  // A dim of length 1 is never stepped; give TMA a stride it accepts whatever the caller's was.
  const int64_t any_valid = kTmaAlignBytes / static_cast<int64_t>(dtype_size(dtype));
  return FwdStrides{batch > 1 ? s.batch : any_valid, seqlen > 1 ? s.seq : any_valid, heads > 1 ? s.head : any_valid};
}

template <int kHeadDim>
bool try_head_dim(const FwdArgs& args, const Problem& p, cudaStream_t stream) {
  if constexpr (head_dim_built(kHeadDim)) {
    if (p.dim_qk != kHeadDim) return false;
    if (p.dtype == DType::kFloat16) {
      run_fwd_hdim<cutlass::half_t, kHeadDim>(args, stream);
      return true;
    }
    if (p.dtype == DType::kBFloat16) {
      run_fwd_hdim<cutlass::bfloat16_t, kHeadDim>(args, stream);
      return true;
    }
  }
  return false;
}

template <int kHeadDim>
bool try_bwd_head_dim(const Problem& p, const BwdArgs& args, void* workspace, cudaStream_t stream) {
  if constexpr (head_dim_built(kHeadDim)) {
    if (p.dim_qk != kHeadDim) return false;
    if (p.dtype == DType::kFloat16) {
      run_bwd_hdim<cutlass::half_t, kHeadDim>(p, args, workspace, stream);
      return true;
    }
    if (p.dtype == DType::kBFloat16) {
      run_bwd_hdim<cutlass::bfloat16_t, kHeadDim>(p, args, workspace, stream);
      return true;
    }
  }
  return false;
}

// Every rule of one pass: features, device, TMA legality of q, k, v and the pass's fourth TMA
// tensor (`out` stored by the forward, `dout` loaded by the backward), sizes.
template <std::size_t kN>
std::string pass_reason(const Problem& p, const char* pass, const int (&head_dims)[kN], const char* fourth_name,
                        const TensorView& fourth, const Strides3& fourth_strides) {
  std::string r = feature_reason(p, pass, head_dims);
  auto add = [&r](const std::string& line) {
    if (!line.empty()) r += (r.empty() ? "" : "\n") + line;
  };
  add(device_reason(p));
  if (p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16) {
    const int64_t b = p.batch, sq = p.max_seqlen_q, sk = p.max_seqlen_k;
    add(tma_reason("q", p.q, p.sq, b, sq, p.heads_q, p.dtype));
    add(tma_reason("k", p.k, p.sk, b, sk, p.heads_k, p.dtype));
    add(tma_reason("v", p.v, p.sv, b, sk, p.heads_k, p.dtype));
    add(tma_reason(fourth_name, fourth, fourth_strides, b, sq, p.heads_q, p.dtype));
  }
  add(size_reason(p));
  return r;
}

// FwdArgs::key_tile for p (fwd_args_sm90.h).
int key_tile(const Problem& p, const MaskSpec& mask) {
  const int long_tile = long_key_tile(static_cast<int>(p.dim_qk));
  if (long_tile == 0 || p.dim_v != p.dim_qk || mask.left >= 0 || mask.right >= 0) return 0;
  // Read on every call (a few string compares next to a launch), so a test can set it per case.
  const char* env = std::getenv("FLASHTRAIN_FWD_KEY_TILE");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0)
    return p.max_seqlen_k >= kLongKeyTileMinSeqlenK ? long_tile : 0;
  if (std::strcmp(env, "128") == 0) return 0;
  FT_CHECK(std::strcmp(env, "long") == 0, "FLASHTRAIN_FWD_KEY_TILE='", env, "': expected 128, long or auto");
  return long_tile;
}

// BwdArgs::cluster: FLASHTRAIN_BWD_CLUSTER=dq (or unset) runs pairs that share the Q / dO loads and
// sum dQ within the pair, =loads pairs that only share the loads, =off single blocks. The dq pairs
// ran 4-10% faster in every measured row (bench/results/2026-12-05_run23/about.txt, call 1). Read
// on every call, like key_tile.
BwdCluster bwd_cluster() {
  const char* env = std::getenv("FLASHTRAIN_BWD_CLUSTER");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "dq") == 0) return BwdCluster::kLoadsAndDq;
  if (std::strcmp(env, "off") == 0) return BwdCluster::kOff;
  FT_CHECK(std::strcmp(env, "loads") == 0, "FLASHTRAIN_BWD_CLUSTER='", env, "': expected dq, loads or off");
  return BwdCluster::kLoads;
}

// BwdArgs::band_heads: FLASHTRAIN_BWD_BAND=N (a positive integer) launches the key tiles of N
// units (a batch entry's KV head, or a chunk of its query heads) at a time tile-major under
// causal-style masks, =auto (or unset) bwd_band_units' rule (half of L2, at least the kernel's
// kMinBandUnits): a knob to measure the trade between the grid's tail and L2 reuse. Read on
// every call.
int bwd_band() {
  const char* env = std::getenv("FLASHTRAIN_BWD_BAND");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  FT_CHECK(*end == '\0' && n > 0 && n <= (1 << 20), "FLASHTRAIN_BWD_BAND='", env,
           "': expected auto or a positive number of heads");
  return static_cast<int>(n);
}

// BwdArgs::wide_d256: D 256's backward with 80-key tiles (bwd_wide_kernel_sm90.h) or the split-D
// kernel and its cluster pairs. The wide kernel unless FLASHTRAIN_BWD_D256=split, in both modes
// (default mode: 1.02-1.13x the split one's backward on an H100, run 42; deterministic: run 47).
// Read on every call, like bwd_cluster.
bool bwd_wide_d256() {
  const char* env = std::getenv("FLASHTRAIN_BWD_D256");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "wide") == 0) return true;
  FT_CHECK(std::strcmp(env, "split") == 0, "FLASHTRAIN_BWD_D256='", env, "': expected wide or split");
  return false;
}

}  // namespace

std::string refusal(const Problem& p) { return pass_reason(p, "forward", kHeadDims, "out", p.out, p.so); }

void run_fwd(const Problem& p, cudaStream_t stream) {
  FwdArgs a;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.lse = static_cast<float*>(p.lse.data);
  a.q_strides = fwd_strides(p.sq, p.batch, p.max_seqlen_q, p.heads_q, p.dtype);
  a.k_strides = fwd_strides(p.sk, p.batch, p.max_seqlen_k, p.heads_k, p.dtype);
  a.v_strides = fwd_strides(p.sv, p.batch, p.max_seqlen_k, p.heads_k, p.dtype);
  a.out_strides = fwd_strides(p.so, p.batch, p.max_seqlen_q, p.heads_q, p.dtype);
  a.lse_batch_stride = p.lse_batch_stride;
  a.lse_head_stride = p.lse_head_stride;
  a.lse_row_stride = p.lse_row_stride;
  a.batch = static_cast<int>(p.batch);
  a.heads_q = static_cast<int>(p.heads_q);
  a.heads_k = static_cast<int>(p.heads_k);
  a.seqlen_q = static_cast<int>(p.max_seqlen_q);
  a.seqlen_k = static_cast<int>(p.max_seqlen_k);
  a.scale = static_cast<float>(p.scale);
  a.mask = p.mask(p.max_seqlen_q, p.max_seqlen_k);
  a.num_sms = device_info(p.device_index).num_sms;
  a.key_tile = key_tile(p, a.mask);
  if (a.batch == 0 || a.heads_q == 0 || a.seqlen_q == 0) return;  // nothing to write
  if (a.mask.upper_bound_only()) a.tile_counter = tile_counter(p.device_index, stream);
  const bool ran = try_head_dim<64>(a, p, stream) || try_head_dim<128>(a, p, stream) || try_head_dim<256>(a, p, stream);
  // refusal() rejects these first; reaching here means a caller skipped it.
  FT_CHECK(ran, "sm90 forward: no kernel for dtype ", dtype_name(p.dtype), ", head dim ", p.dim_qk,
           "; built head dims: ", FLASHTRAIN_HDIMS_BUILT);
}

std::string bwd_refusal(const Problem& p) {
  std::string r = pass_reason(p, "backward", kBwdHeadDims, "dout", p.dout, p.sdo);
  if (p.batch == 0 || p.heads_q == 0 || p.max_seqlen_q == 0 || p.max_seqlen_k == 0)
    r += detail::concat(r.empty() ? "" : "\n", "sm90: empty problem (batch ", p.batch, ", heads ", p.heads_q, ", Sq ",
                        p.max_seqlen_q, ", Sk ", p.max_seqlen_k, "): TMA needs non-empty tensors, the sm80 path runs it");
  return r;
}

void run_bwd(const Problem& p, void* workspace, cudaStream_t stream) {
  BwdArgs args;
  args.q = fwd_strides(p.sq, p.batch, p.max_seqlen_q, p.heads_q, p.dtype);
  args.k = fwd_strides(p.sk, p.batch, p.max_seqlen_k, p.heads_k, p.dtype);
  args.v = fwd_strides(p.sv, p.batch, p.max_seqlen_k, p.heads_k, p.dtype);
  args.dout = fwd_strides(p.sdo, p.batch, p.max_seqlen_q, p.heads_q, p.dtype);
  args.cluster = bwd_cluster();
  args.band_heads = bwd_band();
  args.wide_d256 = bwd_wide_d256();
  const bool ran = try_bwd_head_dim<64>(p, args, workspace, stream) ||
                   try_bwd_head_dim<128>(p, args, workspace, stream) ||
                   try_bwd_head_dim<256>(p, args, workspace, stream);
  // bwd_refusal() rejects these first; reaching here means a caller skipped it.
  FT_CHECK(ran, "sm90 backward: no kernel for dtype ", dtype_name(p.dtype), ", head dim ", p.dim_qk,
           "; built head dims: ", FLASHTRAIN_HDIMS_BUILT);
}

}  // namespace flashtrain::cuda::sm90
