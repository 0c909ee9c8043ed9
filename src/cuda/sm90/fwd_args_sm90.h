// FwdArgs: the plain host-side description of one dense forward call, built from a Problem by
// dispatch_sm90.cu and turned into kernel Params (TMA descriptors) by fwd_launch_template_sm90.h.
// Kept free of CuTe types so the dispatcher compiles without the kernel headers.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "../../common/mask.h"

namespace flashtrain::cuda::sm90 {

// Query rows of one work tile: 64 per consumer warpgroup. Two warpgroups (128 rows) take turns at
// the tensor cores everywhere but D = 64, which runs three (192 rows): a D = 64 score costs the
// tensor cores 256 FLOP, which they do at the rate MUFU does its exp2 (16 a clock per SM), so each
// warpgroup's softmax needs two other warpgroups' GEMMs to hide behind (FlashAttention-3's D = 64
// tiles). Three warpgroups leave 160 registers a thread: O 32 + S 64 + P 32 with 128-key tiles.
constexpr int fwd_block_m(int head_dim) { return head_dim == 64 ? 192 : 128; }
// The smallest of them: what bounds the number of work tiles.
constexpr int kFwdMinBlockM = 128;

// Element strides of one BSHD tensor (the last dim is contiguous).
struct FwdStrides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct FwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  FwdStrides q_strides, k_strides, v_strides, out_strides;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;

  int batch = 0, heads_q = 0, heads_k = 0;
  int seqlen_q = 0, seqlen_k = 0;
  float scale = 0.0f;  // softmax scale (natural units); the kernel folds log2(e) into it
  MaskSpec mask{0, -1, -1, 0};
  int num_sms = 0;  // of the device the kernel runs on: the persistent grid's size
  // Causal-style masks: the claim counter of the dynamic tile scheduler (fwd_tile_scheduler_sm90.h),
  // two ints at zero that the launch leaves at zero; nullptr for one block per tile.
  int* tile_counter = nullptr;
  // Keys per K/V tile: 0 for the head dim's default, or long_key_tile(head dim).
  int key_tile = 0;
};

// Without a causal or window mask, once Sk reaches kLongKeyTileMinSeqlenK, D = 128 takes 176-key
// tiles (H200, bench/results/2026-12-03_run16: 3-4% faster forward at Sk 8k, 3-4% slower at 2k,
// where the ragged last tile and the output staged in Q's buffer cost more per key). Below that,
// under a mask, at D = 64 and at D = 256 (whose O leaves no registers for more keys), the 128-key
// default (64 at D = 256). D = 64 ran 192-key tiles until run 48: on two consumer warpgroups they
// were 5.7% faster at Sk 8k (run 19), but on three, where S, P and O no longer fit 160 registers
// together and P went to the P V GEMM through shared memory, 128-key tiles were 1.08-1.13x faster
// (H100, bench/results/2026-12-07_run48 call 1, Sk 2k-16k, bf16 and fp16).
// FLASHTRAIN_FWD_KEY_TILE=128 or long overrides the choice where a long tile exists.
constexpr int long_key_tile(int head_dim) { return head_dim == 128 ? 176 : 0; }
constexpr int kLongKeyTileMinSeqlenK = 8192;

// Defined in fwd_launch_template_sm90.h, instantiated once per (Element, head dim) in
// src/cuda/instantiations/fwd_hdim{D}_{fp16|bf16}_sm90.cu.
template <typename Element, int kHeadDim>
void run_fwd_hdim(const FwdArgs& args, cudaStream_t stream);

}  // namespace flashtrain::cuda::sm90
