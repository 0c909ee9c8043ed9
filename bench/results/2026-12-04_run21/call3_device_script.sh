#!/bin/bash
# Call 3 (not run yet): the split-D backward with dQ added a step late (behind the next step's GEMMs,
# dq_lag.patch, applied here to this tree) against the landed kernel, which adds dQ at the end of its
# step (a worktree of the same commit in .ab/main: `git worktree add --detach .ab/main HEAD`, carry
# [".cutlass", ".gtest", ".ab"]). Only D 256 is built. The CUDA tests on the patched tree (D 64 / 128
# cases skip), racecheck, the A/B, then the patched tree against cuDNN and FlashAttention-2 at D 256.
# Usage: COMMIT=<landed commit> bash bench/results/2026-12-04_run21/call3_device_script.sh $OUT
set -u
git apply bench/results/2026-12-04_run21/dq_lag.patch || { echo "dq_lag.patch does not apply"; exit 1; }
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=200 timeout 470 scripts/gpu_ab.sh $o .ab/main --label-b "${COMMIT:-landed}" --tests-on a --hdims '256' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*CudaNumerics*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*Sm90SplitDMasksAndShapes/bf16' \
  --bench '--seqlens 2048,8192,16384 --dims 256 --dtypes bf16,fp16 --deterministic' --deadline 460 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so && $SECONDS -lt 500 ]]; then
  FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="${COMMIT:-unknown}+dq_lag.patch" \
    PYTHONPATH=$PWD/python timeout $((560 - SECONDS)) python3 -u bench/bench_attention.py --dims 256 \
    --seqlens 2048,8192,16384 --dtypes bf16,fp16 --deterministic --json $o/d256.json --markdown $o/d256.md > $o/d256.log 2>&1
  echo "d256 grid: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
fi
tar czf "$1/s19c3.tgz" -C /tmp ab
cat $o/summary.txt $o/times.txt; cat $o/ab.md; cat $o/d256.md
