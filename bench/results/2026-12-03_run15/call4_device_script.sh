#!/usr/bin/env bash
# device call 4 (session 12): A = this tree (09afc6f: the dQ writer completes a step's reductions
# before the next step's; default walk not rotated), B = b4ac2af; D 128 only, no C++ tests (no
# device time left for them): the A/B and a gradient check against fp32.
out=$1; cd "$(dirname "$0")/.."
BUILD_JOBS=16 timeout 150 scripts/gpu_ab.sh $out/ab .ab/b4 --label-b b4 --hdims '128' --tests '' --race '' \
  --bench '--seqlens 8192 --dims 128 --dtypes bf16,fp16 --deterministic' > $out/ab_stdout.log 2>&1
echo "gpu_ab rc $? at $SECONDS s"
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so PYTHONPATH=$PWD/python \
  timeout 25 python3 .ab/check_grads.py > $out/check_grads.log 2>&1
cat $out/ab/summary.txt $out/check_grads.log; tail -9 $out/ab/ab.md 2>/dev/null; echo "elapsed $SECONDS"
