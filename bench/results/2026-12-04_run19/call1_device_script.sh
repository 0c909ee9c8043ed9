#!/bin/bash
# Session 17 call 1: this tree (sm90 backward publishes the staged dQ after the S^T wait; the D 64
# forward takes 192-key tiles from Sk 2048 without a mask) against main 0023b48; ncu of the D 64
# forward at 8k on this tree.
mkdir -p /tmp/ab
BUILD_JOBS=16 STEP_LIMIT=150 timeout 560 scripts/gpu_ab.sh /tmp/ab .ab/main --label-b main --tests-on a --hdims '64;128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16 --deterministic' \
  --ncu 'fwd_kernel_sm90:8192:64:bf16:no' --deadline 545 > /tmp/ab/gpu_ab.out 2>&1
tar czf "$1/s17c1.tgz" -C /tmp ab
cat /tmp/ab/summary.txt; cat /tmp/ab/ab.md; tail -4 /tmp/ab/gpu_ab.out
