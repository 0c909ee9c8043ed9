// The column order of the fp32 dQ accumulator (dq_accum, sm80/bwd_plan.h) where the sm90 D 64 /
// 128 backward adds into it: by TMA reductions of a shared-memory staging tile in boxes of 32
// columns (bwd_kernel_traits_sm90.h), whose 16-byte chunks the consumers write in an order of
// their own, so that each half-warp's 64-bit stores cover all 32 banks (bwd_smem_stores_sm90.h).
// The TMA copies a box as it is, so dq_accum holds that order too and the convert kernel
// (sm80/bwd_postprocess.h) reads it back.
#pragma once
#include "../../common/host_device.h"

namespace flashtrain::cuda {

// Where logical chunk j (columns 4 j .. 4 j + 3 of a 32-column box, j in [0, 8)) sits in the
// staged order: the two chunks of an 8-column block 64 bytes apart, (j / 2) + 4 (j % 2).
FT_HOST_DEVICE constexpr int staged_dq_chunk(int j) { return (j >> 1) | ((j & 1) << 2); }

}  // namespace flashtrain::cuda
