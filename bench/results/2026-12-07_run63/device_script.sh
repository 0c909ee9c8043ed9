#!/bin/bash
# Run 63: one device call that does what the card that came allows (carry [".prebuild/out/main",
# ".prebuild/out/run63"]):
#   H200: run 57's script on main's prebuilt library (.prebuild/out/main): issue 6's full grid,
#   then issue 7's paired end-to-end Llama run;
#   otherwise: scripts/gpu_ab.sh on .prebuild/out/run63 (A: main; B: main + stats_scale_late_v2.patch
#   + fwd_shifted_rows.patch): B's forward and bf16 backward tests, racecheck of the shifted D 64
#   forward cases and Sm90ShapesMultiStep/bf16, then the A/B timing.
# Usage (device): bash bench/results/2026-12-07_run63/device_script.sh OUTDIR [COMMIT]
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$1"; echo "GPU $gpu" > "$1/gpu.txt"
if [[ $gpu == *H200* ]]; then
  LIB_XZ=.prebuild/out/main/a/libflashtrain_torch.so.xz NS=flashtrain COMMIT="${2:-main}" DEADLINE=${DEADLINE:-570} \
    bash bench/results/2026-12-07_run57/device_script.sh "$1"
else
  STEP_LIMIT=${STEP_LIMIT:-200} scripts/gpu_ab.sh "$1" --prebuilt .prebuild/out/run63 \
    --tests 'Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Sm90BlockMask.*:Built/CudaFwd*:Dtypes/CudaBackward.*/bf16:Targets/Accuracy.*/cuda_*:Targets/MaskedRows.*/cuda_*-*WideKeyTiles*:*SplitD*' \
    --race '*Sm90Forward*d64_right_window_shifted_rows:*Sm90Forward*many_tiles_d64_causal_192_rows:*Sm90ShapesMultiStep/bf16' \
    --bench '--seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16' --deadline 560
fi
