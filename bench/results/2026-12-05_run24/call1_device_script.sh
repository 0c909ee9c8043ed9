#!/bin/bash
# Run 24 call 1: the deterministic D 256 backward with its dQ turns passed on by the producer's
# warp 1, and causal self-attention's rotated dQ walk without co-residency (this tree, A) against
# 5ed1e11 (B, a worktree in .ab/base): both built for D 64 and 256, the CUDA tests on A (with
# DeterministicCausalBeyondOneWave and the schedule model), racecheck of the deterministic tests,
# the A/B in one process (default and deterministic, D 256), then A's D 256 grid against cuDNN and
# FlashAttention-2 with the deterministic column.
# Before the call (here): git worktree add --detach .ab/base 5ed1e11; .cutlass and .gtest
# Usage (device, carry [".cutlass", ".gtest", ".ab"]): COMMIT=<HEAD> bash bench/results/2026-12-05_run24/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=200 timeout 420 scripts/gpu_ab.sh $o .ab/base --label-b 5ed1e11 --tests-on a --hdims '64;256' \
  --tests '*CudaBackward*:*Deterministic*cuda*:*BackwardTileOrder*:*CudaNumerics*' \
  --race '*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--seqlens 2048,8192,16384 --dims 256 --dtypes bf16,fp16 --deterministic' --deadline 410 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so && $SECONDS -lt 480 ]]; then
  FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="${COMMIT:-unknown}" \
    PYTHONPATH=$PWD/python timeout $((565 - SECONDS)) python3 -u bench/bench_attention.py --dims 256 \
    --seqlens 2048,4096,8192,16384 --deterministic --json $o/d256.json --markdown $o/d256.md > $o/d256.log 2>&1
  echo "d256 grid: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
fi
tar czf "$1/run24_call1.tgz" --exclude='*build*.log' -C /tmp ab
cp $o/summary.txt $o/times.txt $o/ab.md $o/d256.md $o/d256.json "$1/" 2>/dev/null
cat $o/summary.txt $o/times.txt; cat $o/ab.md; cat $o/d256.md
