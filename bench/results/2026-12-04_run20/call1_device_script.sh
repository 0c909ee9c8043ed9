#!/bin/bash
# Session 18 call 1: this tree (the D 128 default backward keeps dK in flight across the step
# boundary) against main ce3bcbd in .ab/main, D 128 only (D 64's SASS is main's); then the e2e
# paired run on this tree's build.
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=150 timeout 430 scripts/gpu_ab.sh $o .ab/main --label-b main --tests-on a --hdims '128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*Sm90ShapesMultiStep/fp16' \
  --bench '--seqlens 2048,8192,16384 --dims 128 --dtypes bf16,fp16 --deterministic' --deadline 420 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
tar czf "$1/s18c1.tgz" -C /tmp ab
left=$((555 - SECONDS))
if (( left > 80 )); then
  FLASHTRAIN_COMMIT=dk-in-flight FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so PYTHONPATH=python \
    timeout $left python3 bench/e2e/run_e2e.py --mode paired --out-dir $o/e2e --budget-seconds $((left - 25)) --paired-rounds 16 \
    --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
  echo "e2e: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
fi
tar czf "$1/s18c1.tgz" -C /tmp ab
cat $o/summary.txt $o/times.txt; cat $o/ab.md; tail -12 $o/e2e.log
