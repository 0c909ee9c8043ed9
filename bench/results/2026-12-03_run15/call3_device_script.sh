#!/usr/bin/env bash
# device call 3 (session 12): A = this tree (b4ac2af: producer warpgroup + per-thread arrivals + rotated
# default walk), B = 1d2dcd3; tests and racecheck on A; A/B; full grid and ncu of A; e2e paired on A.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 STEP_LIMIT=200 timeout 500 scripts/gpu_ab.sh /tmp/ab .ab/head --label-b head --tests-on a \
  --tests '*cuda*:*Cuda*:*CUDA*:*Sm90*' \
  --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*Bf16GqaDqAtTheFp32DsFloor*' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16,fp16 --deterministic' \
  --grid b4ac2af --ncu 'bwd_kernel_sm90:8192:128:bf16:no' --deadline 470 > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
lib=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so
left=$((585 - SECONDS))
if [[ -f $lib && $left -gt 60 ]]; then
  FLASHTRAIN_COMMIT=b4ac2af FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout $((left - 5)) \
    python3 bench/e2e/run_e2e.py --mode paired --out-dir /tmp/e2e --budget-seconds $((left - 15)) \
    --paired-rounds 16 --seqs 4k,8k,16k,32k > /tmp/e2e.log 2>&1
  echo "e2e rc $? at $SECONDS s"; cp /tmp/e2e.log /tmp/e2e/ 2>/dev/null
  tar czf $out/e2e.tgz -C /tmp e2e
fi
cat /tmp/ab/summary.txt; grep -a "FAILED" /tmp/ab/tests_a.log | head; tail -34 /tmp/ab/ab.md 2>/dev/null
cat /tmp/ab/ncu/ncu_summary.md 2>/dev/null | head -20; grep -a "^| 4k\|^| 8k\|^| 16k\|^| 32k" /tmp/e2e/RESULTS.md 2>/dev/null; echo "elapsed $SECONDS"
