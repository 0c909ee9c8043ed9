#!/bin/bash
# A/B of an experiment kept as a patch against the commit it applies to, D 256 only, in one device
# call: the patch applied to this tree (A) against a worktree of the same commit (B, .ab/main).
# The CUDA tests on A (D 64 / 128 cases skip), racecheck, the A/B, then A against cuDNN and
# FlashAttention-2 at D 256.
# Before the call (here): git worktree add --detach .ab/main HEAD; scripts/fetch_cutlass.sh and
# scripts/pack_gtest.sh make .cutlass and .gtest
# Usage (device, carry [".cutlass", ".gtest", ".ab"]):
#   PATCH=dq_lag.patch COMMIT=<HEAD> bash bench/results/2026-12-04_run21/patch_ab_device_script.sh OUTDIR
# PATCH: files in this folder, applied in order (dq_lag.patch: dQ(t) added in step t + 1 behind its
# GEMMs; dq_float4.patch: dQ added with 16-byte vector atomics after a lane-pair shuffle;
# dq_det_defer.patch: the deterministic kernel passes its dQ turn on in the next step; float4 then
# det_defer apply together, the second with fuzz).
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
here=bench/results/2026-12-04_run21
patches=${PATCH:?PATCH=<file in $here>[ <file> ...]}
name=""
for p in $patches; do
  { git apply "$here/$p" 2>/dev/null || patch -p1 -F3 < "$here/$p"; } || { echo "$p does not apply"; exit 1; }
  name="${name:+$name+}${p%.patch}"
done
label="${COMMIT:-HEAD}+$name"
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
BUILD_JOBS=16 STEP_LIMIT=200 timeout 470 scripts/gpu_ab.sh $o .ab/main --label-b "${COMMIT:-landed}" --tests-on a --hdims '256' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*CudaNumerics*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*Sm90SplitDMasksAndShapes/bf16' \
  --bench '--seqlens 2048,8192,16384 --dims 256 --dtypes bf16,fp16 --deterministic' --deadline 460 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
if [[ -f build-ab-a/python/flashtrain/libflashtrain_torch.so && $SECONDS -lt 500 ]]; then
  FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="$label" \
    PYTHONPATH=$PWD/python timeout $((560 - SECONDS)) python3 -u bench/bench_attention.py --dims 256 \
    --seqlens 2048,8192,16384 --dtypes bf16,fp16 --deterministic --json $o/d256.json --markdown $o/d256.md > $o/d256.log 2>&1
  echo "d256 grid: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
fi
tar czf "$1/${name//+/_}.tgz" -C /tmp ab  # the device refuses "+" in a returned name
cat $o/summary.txt $o/times.txt; cat $o/ab.md; cat $o/d256.md
