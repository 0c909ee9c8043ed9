#!/usr/bin/env bash
# device call 2 (session 12): A = this tree (producer warpgroup in the sm90 backward), B = 1d2dcd3
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 STEP_LIMIT=220 timeout 545 scripts/gpu_ab.sh /tmp/ab .ab/head --label-b head --tests-on a \
  --tests '*cuda*:*Cuda*:*CUDA*:*Sm90*' \
  --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*Bf16GqaDqAtTheFp32DsFloor*' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16,fp16 --deterministic' \
  --deadline 500 > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
if [[ -x build-ab-a/flashtrain_tests ]] && [[ $SECONDS -lt 490 ]]; then
  timeout $((570 - SECONDS)) compute-sanitizer --tool synccheck build-ab-a/flashtrain_tests \
    --gtest_filter='*Sm90ShapesMultiStep/bf16*' > /tmp/ab/synccheck_a.log 2>&1
  echo "synccheck rc $? at $SECONDS s: $(grep -a 'SUMMARY' /tmp/ab/synccheck_a.log)"
fi
tar czf $out/ab.tgz -C /tmp ab ab_stdout.log
cat /tmp/ab/summary.txt; grep -a "FAILED\|Failure\|error" /tmp/ab/tests_a.log | head -20; tail -34 /tmp/ab/ab.md 2>/dev/null; echo "elapsed $SECONDS"
