#!/bin/bash
# Session 18 call 4: this tree against main (ce3bcbd in .ab/main; same kernels as a47be61): the D 64
# default bf16 backward takes K's fp16 copy and the tile maxima from the statistics warps instead of
# the consumers' prologue (call 3 measured that move on every kernel: D 64 default faster, D 128
# and deterministic slower, so only D 64 default keeps it); D 128 and the deterministic kernels'
# SASS is main's. The backward, numerics and accuracy CUDA tests on this tree, racecheck, and the
# A/B at D 64 / 128.
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=240 timeout 555 scripts/gpu_ab.sh $o .ab/main --label-b main --tests-on a --hdims '64;128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*:*CudaNumerics*:*Accuracy*cuda*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--seqlens 2048,4096,16384 --dims 64,128 --dtypes bf16 --deterministic' --deadline 550 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
tar czf "$1/s18c4.tgz" -C /tmp ab
cat $o/summary.txt $o/times.txt; cat $o/ab.md
