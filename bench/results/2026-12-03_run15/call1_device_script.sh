#!/usr/bin/env bash
# device call 1 (session 12): A = this tree (1d2dcd3, det key tiles launched descending), B = 33eb025
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 timeout 520 scripts/gpu_ab.sh /tmp/ab .ab/base --label-b base --tests-on a \
  --tests '*Determin*:*Sm90*:*CudaBackward*' \
  --race '*DeterministicSelfAttentionBitwise/bf16:*Sm90ShapesMultiStep/bf16' \
  --bench '--seqlens 4096,8192,16384 --dims 64,128 --dtypes bf16,fp16 --deterministic' > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
cat /tmp/ab/summary.txt; tail -40 /tmp/ab/ab.md 2>/dev/null; echo "elapsed $SECONDS"
