#!/bin/bash
# Session 19 call 1: the sm90 split-D backward for D 256 (bwd_split_kernel_sm90.h) against main
# (deb4ff0 in .ab/main, where D 256 runs the sm80 backward). Only D 256 is built. The CUDA tests
# on this tree (D 64 / 128 cases skip), racecheck, the A/B, then this tree against cuDNN and
# FlashAttention-2 at D 256.
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=200 timeout 470 scripts/gpu_ab.sh $o .ab/main --label-b main --tests-on a --hdims '256' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*:*CudaNumerics*:*Accuracy*cuda*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--seqlens 2048,8192,16384 --dims 256 --dtypes bf16,fp16 --deterministic' --deadline 460 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so && $SECONDS -lt 500 ]]; then
  FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT=${COMMIT:-unknown} \
    PYTHONPATH=$PWD/python timeout $((560 - SECONDS)) python3 -u bench/bench_attention.py --dims 256 \
    --seqlens 2048,8192,16384 --dtypes bf16,fp16 --deterministic --json $o/d256.json --markdown $o/d256.md > $o/d256.log 2>&1
  echo "d256 grid: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
fi
tar czf "$1/s19c1.tgz" -C /tmp ab
cat $o/summary.txt $o/times.txt; cat $o/ab.md; cat $o/d256.md
