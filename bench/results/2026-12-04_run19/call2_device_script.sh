#!/bin/bash
# Session 17 call 2: this tree 964d9a3 (D 64 forward: a quarter of the exp2 by polynomial on the FMA
# pipe) against 532b0d0 in .ab/main; forward tests on this tree; then the full grid on this tree
# (bench_attention.py now times the backends in alternation).
mkdir -p /tmp/ab
BUILD_JOBS=16 STEP_LIMIT=150 timeout 585 scripts/gpu_ab.sh /tmp/ab .ab/main --label-b 532b0d0 --tests-on a --hdims '64;128' \
  --tests '*Sm90Forward*:*Sm90BlockMask*:*FastMath*:*MaskedRows*cuda*:*Accuracy*cuda*:*CudaFwd*' --race '' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16,fp16' \
  --grid 964d9a3 --deadline 570 > /tmp/ab/gpu_ab.out 2>&1
tar czf "$1/s17c2.tgz" -C /tmp ab
cat /tmp/ab/summary.txt; cat /tmp/ab/ab.md; tail -4 /tmp/ab/gpu_ab.out
