#!/usr/bin/env bash
# device call 3 (session 13): builds the torch extensions only (A = this tree, 866079c + results-only
# changes; B = 95c0c20), a one-case A/B, then A's full grid and the e2e paired run on A.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 timeout 330 scripts/gpu_ab.sh /tmp/ab .ab/base --label-b base --hdims '64;128' --tests '' --race '' \
  --bench '--seqlens 8192 --dims 128 --dtypes bf16' --grid 866079c --deadline 320 > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
lib=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so
left=$((440 - SECONDS))
if [[ -f $lib && $left -gt 60 ]]; then
  FLASHTRAIN_COMMIT=866079c FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout $((left - 5)) \
    python3 bench/e2e/run_e2e.py --mode paired --out-dir /tmp/e2e --budget-seconds $((left - 15)) \
    --paired-rounds 16 --seqs 4k,8k,16k,32k > /tmp/e2e.log 2>&1
  echo "e2e rc $? at $SECONDS s"; cp /tmp/e2e.log /tmp/e2e/ 2>/dev/null
  tar czf $out/e2e.tgz -C /tmp e2e
fi
cat /tmp/ab/summary.txt; grep -a "^| 4k\|^| 8k\|^| 16k\|^| 32k" /tmp/e2e/RESULTS.md 2>/dev/null; echo "elapsed $SECONDS"
