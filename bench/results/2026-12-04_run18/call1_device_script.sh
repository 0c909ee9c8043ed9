#!/bin/bash
# Session 16 call 1: persistent default backward (this tree) vs main c9388f1.
mkdir -p /tmp/ab
BUILD_JOBS=16 STEP_LIMIT=150 timeout 430 scripts/gpu_ab.sh /tmp/ab .ab/main --label-b main --tests-on a --hdims '64;128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*' \
  --race '*Sm90PersistentBlocks/bf16:*Sm90ShapesMultiStep/bf16:*Sm90FewStepsPerBlock/bf16' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16 --deterministic' --deadline 420 > /tmp/ab/gpu_ab.out 2>&1
# The same builds with a block per tile in A (FLASHTRAIN_BWD_BLOCKS=0): what persistence alone moves.
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so ]]; then
  FLASHTRAIN_BWD_BLOCKS=0 PYTHONPATH=$PWD/bench timeout 100 python3 bench/ab_builds.py \
    --a build-ab-a/python/flashtrain/libflashtrain_torch.so --b build-ab-main/python/flashtrain/libflashtrain_torch.so \
    --labels "this-per-tile,main" --seqlens 2048,8192 --dims 64,128 --dtypes bf16 \
    --markdown /tmp/ab/ab_per_tile.md --json /tmp/ab/ab_per_tile.json > /tmp/ab/ab_per_tile.log 2>&1
  echo "per-tile ab: exit $?" >> /tmp/ab/gpu_ab.out
fi
tar czf "$1/s16c1.tgz" -C /tmp ab
tail -40 /tmp/ab/gpu_ab.out; cat /tmp/ab/ab_per_tile.md 2>/dev/null
