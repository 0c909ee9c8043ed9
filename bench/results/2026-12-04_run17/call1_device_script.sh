#!/usr/bin/env bash
# device call 1 (session 14): A = this tree (backward consumers meet through dS mbarriers, dQ a step
# late), B = 0e79cb1 (.ab/main0). A's CUDA tests + racecheck, A/B, then A/B with FLASHTRAIN_BWD_STAGGER=1.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 STEP_LIMIT=200 timeout 450 scripts/gpu_ab.sh /tmp/ab .ab/main0 --label-b main0 --tests-on a --hdims '64;128' \
  --tests '*cuda*:*Cuda*:*CUDA*:*Sm90*' --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16 --deterministic' --deadline 440 > /tmp/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
cp /tmp/ab_stdout.log /tmp/ab/
tar czf $out/ab.tgz -C /tmp ab
left=$((560 - SECONDS))
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so && $left -gt 40 ]]; then
  FLASHTRAIN_BWD_STAGGER=1 PYTHONPATH=$PWD/bench timeout $left python3 bench/ab_builds.py \
    --a build-ab-a/python/flashtrain/libflashtrain_torch.so --b build-ab-main0/python/flashtrain/libflashtrain_torch.so \
    --labels stagger,main0 --seqlens 2048,8192 --dims 64,128 --dtypes bf16 --markdown $out/ab_stagger.md > $out/ab_stagger.log 2>&1
  echo "stagger rc $? at $SECONDS s"
fi
cat /tmp/ab/summary.txt; cat /tmp/ab/ab.md; cat $out/ab_stagger.md 2>/dev/null; echo "elapsed $SECONDS"
