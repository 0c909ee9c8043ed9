// What the sm90 backward's host code passes from the dispatcher (dispatch_sm90.cu) to the
// per-(dtype, head dim) launchers: the Problem plus TMA-legal strides of the tensors the main
// kernel loads, and its launch options. Kept free of CuTe types so the dispatcher compiles
// without the kernel headers.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "../../api/problem.h"
#include "fwd_args_sm90.h"

namespace flashtrain::cuda::sm90 {

enum class BwdCluster { kOff, kLoads, kLoadsAndDq };

struct BwdArgs {
  FwdStrides q, k, v, dout;  // TMA-legal strides of the tensors the main kernel loads
  // D = 256: the wide-key-tile kernel (bwd_wide_kernel_sm90.h: 80-key tiles, no cluster pair)
  // instead of the split-D one; dispatch_sm90.cu's bwd_wide_d256(): unless
  // FLASHTRAIN_BWD_D256=split.
  bool wide_d256 = true;
  // D = 256 split-D, default mode: the main kernel may run as cluster pairs
  // (bwd_split_kernel_sm90.h) sharing the Q / dO loads, and also summing dQ within the pair before
  // its atomics; FLASHTRAIN_BWD_CLUSTER (dispatch_sm90.cu) picks one; dq unless set.
  BwdCluster cluster = BwdCluster::kLoadsAndDq;
  // Units (KV heads of a batch entry, or chunks of their query heads) per band of the tile-major
  // launch order under a causal-style mask (make_bwd_kernel_params, bwd_launch_template_sm90.h);
  // 0: bwd_band_units' rule. FLASHTRAIN_BWD_BAND sets it.
  int band_heads = 0;
};

// Units a band of the causal backward's tile-major launch order (make_bwd_kernel_params): the
// override `requested` (> 0, FLASHTRAIN_BWD_BAND) as asked; otherwise as many units of
// `unit_bytes` as fill half of `l2_bytes`, but at least `min_units` (the kernel's
// kMinBandUnits); never more than `units` or fewer than 1.
inline int bwd_band_units(int requested, double l2_bytes, double unit_bytes, int min_units, int units) {
  const double band = requested > 0 ? requested : std::max<double>(std::floor(0.5 * l2_bytes / unit_bytes), min_units);
  return static_cast<int>(std::min<double>(std::max(band, 1.0), units));
}

// Defined in bwd_launch_template_sm90.h, instantiated once per (Element, head dim) in
// src/cuda/instantiations/bwd_hdim{D}_{fp16|bf16}_sm90.cu.
template <typename Element, int kHeadDim>
void run_bwd_hdim(const Problem& problem, const BwdArgs& args, void* workspace, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm90
