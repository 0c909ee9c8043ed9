#!/usr/bin/env bash
# device call 2 (session 13): A = this tree (866079c: forward 176-key tiles at D 128 unmasked,
# Sk >= 8192), B = 95c0c20; CUDA tests + racecheck on A; A/B at D 128; the grid and ncu of A;
# then the forward with 176-key tiles forced at Sk 4096 against B.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 STEP_LIMIT=200 timeout 545 scripts/gpu_ab.sh /tmp/ab .ab/base --label-b base --tests-on a \
  --hdims '64;128' --tests '*cuda*:*Cuda*:*CUDA*:*Sm90*' \
  --race '*Sm90Forward*176*:*Sm90Forward*long_keys*' \
  --bench '--seqlens 8192,16384 --dims 128 --dtypes bf16,fp16' \
  --grid 866079c --ncu 'fwd_kernel_sm90:8192:128:bf16:no bwd_kernel_sm90:8192:128:bf16:no' --deadline 520 \
  > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
left=$((585 - SECONDS))
if [[ $left -gt 25 ]]; then
  FLASHTRAIN_FWD_KEY_TILE=176 PYTHONPATH=$PWD/bench timeout $((left - 5)) python3 bench/ab_builds.py \
    --a build-ab-a/python/flashtrain/libflashtrain_torch.so --b build-ab-base/python/flashtrain/libflashtrain_torch.so \
    --labels forced176,base --seqlens 4096 --dims 128 --dtypes bf16,fp16 --markdown /tmp/ab/ab_forced176_4k.md > /tmp/ab/ab_forced176.log 2>&1
  echo "forced 176 ab rc $? at $SECONDS s"
fi
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
cat /tmp/ab/summary.txt; grep -a "FAILED" /tmp/ab/tests_a.log | head; tail -9 /tmp/ab/ab.md 2>/dev/null
tail -6 /tmp/ab/ab_forced176_4k.md 2>/dev/null; cat /tmp/ab/ncu/ncu_summary.md 2>/dev/null | head; echo "elapsed $SECONDS"
