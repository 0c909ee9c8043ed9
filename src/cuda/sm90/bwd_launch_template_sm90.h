// Host side of the sm90 backward for one (element type, head dim): the sm80 preprocess, the sm90
// main kernel (TMA descriptors built here), the sm80 postprocess, all on `stream` over the
// workspace sm80::bwd_workspace_size describes. Included only by the generated instantiation
// files (src/cuda/instantiations/bwd_hdim{D}_{fp16|bf16}_sm90.cu).
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <cuda_runtime.h>

#include "../common/cuda_check.h"
#include "../common/dq_schedule.h"
#include "../common/per_device.h"
#include "../sm80/bwd_params.h"
#include "../sm80/bwd_plan.h"
#include "../sm80/bwd_postprocess.h"
#include "../sm80/bwd_preprocess.h"
#include "bwd_args_sm90.h"
#include "bwd_kernel_sm90.h"
#include "bwd_split_kernel_sm90.h"
#include "bwd_wide_kernel_sm90.h"

namespace flashtrain::cuda::sm90 {

// D <= 128: bwd_kernel_sm90.h (the consumers split the keys); D = 256: bwd_split_kernel_sm90.h.
template <typename Element, int kHeadDim, int kClusterN = 1>
using BwdTraitsFor = std::conditional_t<(kHeadDim > 128), BwdSplitTraits<kHeadDim, Element, kClusterN>,
                                        BwdTraits<kHeadDim, Element>>;

// The main kernel's parameters for `problem`: the sm80 parameters over `workspace`, the TMA
// descriptors and the grid order (rotated: the dQ walk of tile_range.h, common/dq_schedule.h).
template <class Traits>
BwdKernelParams<Traits> make_bwd_kernel_params(const Problem& problem, const BwdArgs& args, const sm80::BwdPlan& plan,
                                               void* workspace, bool rotated) {
  using namespace cute;
  constexpr int kHeadDim = Traits::kHeadDim;
  using Element = typename Traits::Element;
  BwdKernelParams<Traits> kp{};
  kp.p = sm80::make_bwd_params(problem, plan, workspace);
  kp.p.dq_rotated = rotated;
  kp.trace = nullptr;
  auto gmem = [](const void* ptr, int seqlen, int heads, int batch, const FwdStrides& s) {
    return make_tensor(make_gmem_ptr(static_cast<Element const*>(ptr)),
                       make_layout(make_shape(seqlen, Traits::kHeadDim, heads, batch), make_stride(s.seq, _1{}, s.head, s.batch)));
  };
  const int batch = static_cast<int>(problem.batch);
  const int sq = static_cast<int>(problem.max_seqlen_q), sk = static_cast<int>(problem.max_seqlen_k);
  const int hq = static_cast<int>(problem.heads_q), hk = static_cast<int>(problem.heads_k);
  auto mQ = gmem(problem.q.data, sq, hq, batch, args.q);
  auto mdO = gmem(problem.dout.data, sq, hq, batch, args.dout);
  auto mK = gmem(problem.k.data, sk, hk, batch, args.k);
  auto mV = gmem(problem.v.data, sk, hk, batch, args.v);
  using TileQ = Shape<Int<Traits::kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<Traits::kBlockN>, Int<kHeadDim>>;
  using QdOOp = typename Traits::TmaOpQdO;
  using Cluster = Int<Traits::kClusterN>;
  kp.tma_q = make_tma_copy(QdOOp{}, mQ, take<0, 2>(typename Traits::SmemLayoutQdO{}), TileQ{}, Cluster{});
  kp.tma_do = make_tma_copy(QdOOp{}, mdO, take<0, 2>(typename Traits::SmemLayoutQdO{}), TileQ{}, Cluster{});
  kp.tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, typename Traits::SmemLayoutKV{}, TileKV{}, _1{});
  kp.tma_v = make_tma_copy(SM90_TMA_LOAD{}, mV, typename Traits::SmemLayoutKV{}, TileKV{}, _1{});
  kp.shape_q = mQ.shape();
  kp.shape_k = mK.shape();
  if constexpr (!Traits::kSplitD) {
    // dq_accum [B * Sq][Hq][D] fp32 (bwd_plan.h), as (Sq, D, Hq, B) for the TMA reductions.
    auto mdQ = make_tensor(make_gmem_ptr(kp.p.dq_accum),
                           make_layout(make_shape(sq, kHeadDim, hq, batch),
                                       make_stride(static_cast<int64_t>(hq) * kHeadDim, _1{},
                                                   static_cast<int64_t>(kHeadDim), static_cast<int64_t>(sq) * hq * kHeadDim)));
    kp.tma_dq = make_tma_copy(SM90_TMA_REDUCE_ADD{}, mdQ, typename Traits::SmemLayoutdQBox{},
                              Shape<Int<Traits::kBlockM>, Int<Traits::kDqBoxCols>>{}, _1{});
    kp.shape_dq = mdQ.shape();
  }

  // Longest first, within what L2 holds. Under a causal-style bound (no left window) key tile n
  // sees more query rows than n + 1, and with the key tiles of a head adjacent the grid ends on
  // some heads' heaviest tiles; launching every head's tile 0, then every tile 1, ... ends it on
  // the lightest ones (list-scheduling makespan over the mean, 132 SMs, B*S = 16k, D 128: 1.068
  // -> 1.007 at S=1k). But every tile of a head reads the head's Q, dO and adds into its dQ
  // accumulator: over all heads at once that is more than L2 holds (ncu, bf16 D 64 S=1k causal:
  // 2.1 GB of DRAM traffic for 0.5 GB of data, L2 hit rate 51%). So the tile-major walk goes
  // band by band, a band being as many heads as fill half of L2, and at least
  // Traits::kMinBandUnits (bwd_band_units). The rotated dQ walk needs a head's key tiles resident
  // together, so it keeps the head-adjacent order. args.band_heads > 0 (FLASHTRAIN_BWD_BAND) sets
  // the band instead.
  const MaskSpec mask = problem.mask(problem.max_seqlen_q, problem.max_seqlen_k);
  kp.units = batch * static_cast<int>(hk * plan.head_chunks);
  kp.n_blocks = (plan.n_blocks + Traits::kClusterN - 1) / Traits::kClusterN * Traits::kClusterN;
  kp.band_heads = 0;
  if (mask.upper_bound_only() && !kp.p.dq_rotated) {
    int device = 0, l2_bytes = 0;
    FT_CUDA_CHECK(cudaGetDevice(&device), "sm90 backward: cudaGetDevice");
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "sm90 backward: L2 size");
    // Per unit: Q, dO (2 bytes each) and the fp32 dQ accumulator of its query heads, K and V.
    const double unit_bytes = static_cast<double>(kHeadDim) * (8.0 * sq * kp.p.heads_per_chunk + 4.0 * sk);
    kp.band_heads = bwd_band_units(args.band_heads, l2_bytes, unit_bytes, Traits::kMinBandUnits, kp.units);
  }
  return kp;
}

template <class Traits>
dim3 bwd_grid(const BwdKernelParams<Traits>& kp, int batch) {
  return kp.band_heads > 0 ? dim3(static_cast<unsigned>(kp.units) * static_cast<unsigned>(kp.n_blocks))
                           : dim3(static_cast<unsigned>(kp.n_blocks), static_cast<unsigned>(batch),
                                  static_cast<unsigned>(kp.units / batch));
}

template <class Kernel>
void raise_smem_limit(Kernel kernel, int bytes) {
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                "sm90 backward: raising the shared-memory limit to ", bytes, " bytes");
}

// Tells the pair kernels apart in once_per_device.
template <class Traits, bool kDeterministic, bool kPairDq>
struct PairClustersTag {};

// Launches bwd_split_kernel_sm90<Traits, kDeterministic, kPairDq> as cluster pairs: returns false,
// launching nothing, where the device would not co-schedule a pair, or where the walk is rotated,
// its waits wrap, and not every pair of a head fits at once (what rotated's co-residency test
// asked of single blocks).
template <class Traits, bool kDeterministic, bool kPairDq>
bool launch_pairs(const Problem& problem, const BwdArgs& args, const sm80::BwdPlan& plan, void* workspace,
                  bool rotated, cudaStream_t stream) {
  auto kernel = bwd_split_kernel_sm90<Traits, kDeterministic, kPairDq>;
  raise_smem_limit(kernel, Traits::kSmemBytes);
  const BwdKernelParams<Traits> kp = make_bwd_kernel_params<Traits>(problem, args, plan, workspace, rotated);
  cudaLaunchConfig_t config{};
  config.gridDim = bwd_grid(kp, static_cast<int>(problem.batch));
  config.blockDim = dim3(Traits::kNumThreads);
  config.dynamicSmemBytes = Traits::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = Traits::kClusterN;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  // 0 clusters: the device would not co-schedule a pair (e.g. a MIG slice without two free SMs
  // in a GPC). Asked once per kernel and device.
  const int fits = once_per_device<PairClustersTag<Traits, kDeterministic, kPairDq>>([&](int) {
    int clusters = 0;
    FT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config),
                  "sm90 backward: cluster occupancy of the main kernel");
    return clusters + 1;
  });
  if (fits == 1) return false;
  const MaskSpec mask = problem.mask(problem.max_seqlen_q, problem.max_seqlen_k);
  if (rotated && !rotated_dq_waits_point_up(mask, Traits::kBlockM, Traits::kBlockN * Traits::kClusterN) &&
      (fits - 1) * Traits::kClusterN < kp.n_blocks)
    return false;
  FT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, kp), "sm90 backward: cluster launch of the main kernel");
  check_launch("flashtrain::cuda::sm90::bwd_split_kernel_sm90 (cluster pairs)");
  return true;
}

// D = 256 as cluster pairs (bwd_split_kernel_sm90.h; args.cluster: sharing the Q / dO loads, and
// summing dQ in the pair unless kLoads; deterministic: only the pairs summing dQ, which take each
// Q tile's dQ turn as one block of twice the keys): returns false, launching nothing, where the
// pair does not apply (the default mode's rotated walk, FLASHTRAIN_DQ_SCHEDULE=rotated) or
// launch_pairs declines.
template <typename Element, int kHeadDim>
bool launch_cluster_pair(const Problem& problem, const BwdArgs& args, const sm80::BwdPlan& plan, void* workspace,
                         bool rotated, cudaStream_t stream) {
  if constexpr (kHeadDim <= 128) {
    return false;
  } else {
    using Traits = BwdTraitsFor<Element, kHeadDim, 2>;
    if (args.cluster == BwdCluster::kOff) return false;
    if (problem.deterministic) {
      return args.cluster == BwdCluster::kLoadsAndDq &&
             launch_pairs<Traits, true, true>(problem, args, plan, workspace, rotated, stream);
    }
    if (rotated) return false;
    return args.cluster == BwdCluster::kLoadsAndDq
               ? launch_pairs<Traits, false, true>(problem, args, plan, workspace, rotated, stream)
               : launch_pairs<Traits, false, false>(problem, args, plan, workspace, rotated, stream);
  }
}

// D = 256 with 80-key tiles (bwd_wide_kernel_sm90.h, args.wide_d256): returns false, launching
// nothing, unless asked for. The plan's workspace serves as it is (its layout does not depend on
// the key tile); only the grid counts 80-key tiles.
template <typename Element, int kHeadDim>
bool launch_wide(const Problem& problem, const BwdArgs& args, const sm80::BwdPlan& plan, void* workspace,
                 cudaStream_t stream) {
  if constexpr (kHeadDim <= 128) {
    return false;
  } else {
    if (!args.wide_d256) return false;
    using Traits = BwdWideTraits<kHeadDim, Element>;
    sm80::BwdPlan wide = plan;
    wide.block_n = Traits::kBlockN;
    wide.n_blocks = static_cast<int>((problem.max_seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN);
    auto kernel = problem.deterministic ? bwd_wide_kernel_sm90<Traits, true> : bwd_wide_kernel_sm90<Traits, false>;
    raise_smem_limit(kernel, Traits::kSmemBytes);
    const bool rotated = rotate_dq_walk(problem, wide.n_blocks, kernel, Traits::kNumThreads, Traits::kSmemBytes,
                                        Traits::kBlockM, Traits::kBlockN);
    const BwdKernelParams<Traits> kp = make_bwd_kernel_params<Traits>(problem, args, wide, workspace, rotated);
    kernel<<<bwd_grid(kp, static_cast<int>(problem.batch)), Traits::kNumThreads, Traits::kSmemBytes, stream>>>(kp);
    check_launch("flashtrain::cuda::sm90::bwd_wide_kernel_sm90");
    return true;
  }
}

template <typename Element, int kHeadDim>
void run_bwd_hdim(const Problem& problem, const BwdArgs& args, void* workspace, cudaStream_t stream) {
  using Traits = BwdTraitsFor<Element, kHeadDim>;
  const sm80::BwdPlan plan = sm80::make_bwd_plan(problem);
  // The grid and the first_key_tile order need the plan's KV tile; the semaphore array needs at
  // least as many Q tiles as the kernel has.
  FT_CHECK(plan.block_n == Traits::kBlockN && Traits::kBlockM % plan.block_m == 0,
           "sm90 backward: the sm80 plan's tile (", plan.block_m, " x ", plan.block_n,
           ") does not fit the kernel's (", Traits::kBlockM, " x ", Traits::kBlockN, ")");
  const sm80::BwdParams p80 = sm80::make_bwd_params(problem, plan, workspace);
  sm80::launch_bwd_preprocess<Element, kHeadDim, kHeadDim>(p80, stream);
  check_launch("bwd_preprocess");
  const int batch = static_cast<int>(problem.batch);
  if (plan.n_blocks > 0 && batch > 0 && !launch_wide<Element, kHeadDim>(problem, args, plan, workspace, stream)) {
    auto kernel = [&] {
      if constexpr (Traits::kSplitD) {
        return problem.deterministic ? bwd_split_kernel_sm90<Traits, true> : bwd_split_kernel_sm90<Traits, false>;
      } else {
        return problem.deterministic ? bwd_kernel_sm90<Traits, true> : bwd_kernel_sm90<Traits, false>;
      }
    }();
    raise_smem_limit(kernel, Traits::kSmemBytes);
    // bwd_block_coords launches a head's key tiles in descending order under the rotated walk.
    const bool rotated = rotate_dq_walk(problem, plan.n_blocks, kernel, Traits::kNumThreads, Traits::kSmemBytes,
                                        Traits::kBlockM, Traits::kBlockN);
    if (!launch_cluster_pair<Element, kHeadDim>(problem, args, plan, workspace, rotated, stream)) {
      BwdKernelParams<Traits> kp = make_bwd_kernel_params<Traits>(problem, args, plan, workspace, rotated);
      const dim3 grid = bwd_grid(kp, batch);
      const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
      // nullptr unless built with FLASHTRAIN_BWD_TRACE; the split-D kernel records no timeline.
      if constexpr (!Traits::kSplitD) kp.trace = bwd_trace_buffer(blocks, stream);
      kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(kp);
      check_launch("flashtrain::cuda::sm90::bwd_kernel_sm90");
      bwd_trace_dump(kp.trace, blocks, kHeadDim, Traits::kBlockM, Traits::kBlockN, stream);
    }
  }
  // D 64 / 128 (bwd_kernel_sm90) leave dQ in the staged column order; D 256's kernels add it in order.
  sm80::launch_bwd_postprocess<Element, kHeadDim, kHeadDim, sm80::BwdPass::kNormal, !Traits::kSplitD>(p80, stream);
  check_launch("bwd_postprocess");
}

}  // namespace flashtrain::cuda::sm90
