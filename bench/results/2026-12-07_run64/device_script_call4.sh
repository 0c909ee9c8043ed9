#!/bin/bash
# Run 64 call 4 (not run in session 40: its device time ran out): two A/B tests of the sm90
# forward against main, each B prebuilt here (about.txt):
#   v3:   .prebuild/out/run64b, fwd_first_partial_v3.patch (the partial query block first, with
#         the block mask's unmasked tile range as tile indices) - tests, racecheck, A/B D 64 / 128
#   ints: .prebuild/out/run64c, mask_tile_ints.patch (the tile-index mask range alone, no shift) -
#         the block-mask host check and the forward shapes, A/B D 64 / 128
# ints first; then v3 with, while the deadline allows, ncu of A's and B's D 128 bf16 4k
# non-causal forward (B's executed instructions against A's: the prediction in about.txt).
# At most 8 files come back: v3/ (ab.md, ab.json, summary.txt, logs.tgz, ncu.log, ncu.tgz),
# ints.tgz, console.log.
# Usage (device, carry [".prebuild/out/run64b", ".prebuild/out/run64c"]):
#   bash bench/results/2026-12-07_run64/device_script_call4.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1; mkdir -p "$out/v3" "$out/ints"
bench='--seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16'
STEP_LIMIT=${STEP_LIMIT:-100} scripts/gpu_ab.sh "$out/ints" --prebuilt .prebuild/out/run64c \
  --tests 'Shapes/Sm90Forward.*:Sm90BlockMask.*' --race '' --bench "$bench" --deadline 150
STEP_LIMIT=${STEP_LIMIT:-100} scripts/gpu_ab.sh "$out/v3" --prebuilt .prebuild/out/run64b \
  --tests 'Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Sm90BlockMask.*:Targets/Accuracy.*/cuda_*:Targets/MaskedRows.*/cuda_*' \
  --race '*Sm90Forward*d64_right_window_shifted_rows' --bench "$bench" \
  --ncu 'fwd_kernel_sm90:4096:128:bf16:no' --deadline ${NCU_DEADLINE:-330}
cd "$out" && tar czf ints.tgz ints && rm -rf ints && ls -R
