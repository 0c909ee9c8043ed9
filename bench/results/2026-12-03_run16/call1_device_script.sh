#!/usr/bin/env bash
# device call 1 (session 13): A = this tree (forward 176-key tiles at D 128 unmasked; backward dQ
# staging's proxy fence + arrival after the dP^T issue), B = 95c0c20 (main); tests and racecheck on A; A/B.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 STEP_LIMIT=200 timeout 520 scripts/gpu_ab.sh /tmp/ab .ab/base --label-b base --tests-on a \
  --hdims '64;128' --tests '*cuda*:*Cuda*:*CUDA*:*Sm90*' \
  --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*Sm90Forward*many_tiles_d128*:*Sm90Forward*one_ragged*' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16,fp16 --deterministic' --deadline 500 > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
cat /tmp/ab/summary.txt; grep -a "FAILED" /tmp/ab/tests_a.log | head; tail -34 /tmp/ab/ab.md 2>/dev/null; echo "elapsed $SECONDS"
