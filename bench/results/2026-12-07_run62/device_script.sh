#!/bin/bash
# Run 62: one device call that does what the card that came allows (carry [".prebuild/out"]):
#   H200: run 57's script on main's prebuilt library (.prebuild/out/main): issue 6's full grid,
#   then issue 7's paired end-to-end Llama run;
#   otherwise: scripts/gpu_ab.sh on .prebuild/out/run62 (A: main; B: main + stats_scale_late.patch):
#   B's tests (tests_filter.txt: the 42 CUDA tests run 60 had no time for, and the bf16 backward
#   tests the patch touches), racecheck of Sm90ShapesMultiStep/bf16, then the A/B timing.
# Usage (device): bash bench/results/2026-12-07_run62/device_script.sh OUTDIR [COMMIT]
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$1"; echo "GPU $gpu" > "$1/gpu.txt"
if [[ $gpu == *H200* ]]; then
  LIB_XZ=.prebuild/out/main/a/libflashtrain_torch.so.xz NS=flashtrain COMMIT="${2:-main}" DEADLINE=${DEADLINE:-570} \
    bash bench/results/2026-12-07_run57/device_script.sh "$1"
else
  STEP_LIMIT=${STEP_LIMIT:-300} scripts/gpu_ab.sh "$1" --prebuilt .prebuild/out/run62 \
    --tests "$(cat "$here/tests_filter.txt")" --race '*Sm90ShapesMultiStep/bf16' \
    --bench '--seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16' --deadline 560
fi
