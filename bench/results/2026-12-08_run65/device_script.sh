#!/bin/bash
# Run 65: run 64's call 4 with the candidate first (about.txt): A/B tests of the sm90 forward
# against main, each B prebuilt on the CPU machine:
#   v3:   .prebuild/out/run64b (fwd_first_partial_v3.patch: the causal forward's partial query block
#         first, the block mask's unmasked tile range as tile indices) - tests, racecheck, A/B of
#         D 64 / 128, then ncu of A's and B's D 128 bf16 4k non-causal forward while the deadline allows
#   ints: .prebuild/out/run64c (mask_tile_ints.patch: the tile-index range alone) - A/B of D 64 / 128
#         when time is left (skipped once V3_DEADLINE + 120 s would pass the call's limit)
# At most 8 files come back: v3/ (ab.md, ab.json, summary.txt, logs.tgz, ncu.tgz, ncu.log), ints.tgz,
# console.log (the caller writes it; the GPU named first).
# Usage (device, carry [".prebuild/out/run64b", ".prebuild/out/run64c"]):
#   [V3_DEADLINE=s] [CALL_LIMIT=s] bash bench/results/2026-12-08_run65/device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1; mkdir -p "$out/v3" "$out/ints"
start=$SECONDS
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
bench='--seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16'
STEP_LIMIT=${STEP_LIMIT:-100} scripts/gpu_ab.sh "$out/v3" --prebuilt .prebuild/out/run64b \
  --tests 'Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Sm90BlockMask.*:Targets/Accuracy.*/cuda_*:Targets/MaskedRows.*/cuda_*' \
  --race '*Sm90Forward*d64_right_window_shifted_rows' --bench "$bench" \
  --ncu 'fwd_kernel_sm90:4096:128:bf16:no' --deadline ${V3_DEADLINE:-300}
left=$(( ${CALL_LIMIT:-520} - (SECONDS - start) ))
if (( left > 120 )); then
  STEP_LIMIT=60 scripts/gpu_ab.sh "$out/ints" --prebuilt .prebuild/out/run64c \
    --tests 'Sm90BlockMask.*' --race '' --bench "$bench" --deadline $left
else
  echo "ints skipped: $left s left" > "$out/ints/skipped.txt"
fi
cd "$out" && tar czf ints.tgz ints && rm -rf ints && ls -R
