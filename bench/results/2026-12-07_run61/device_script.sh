#!/bin/bash
# Run 61: one device call that does what the card that came allows, from libraries
# scripts/prebuild.sh built on the CPU machine (.prebuild/out/main: main's sources, all head dims,
# with the CUDA C++ test binary; carry [".prebuild/out"]):
#   H200: run 57's script (issue 6's full grid, then issue 7's paired end-to-end Llama run);
#   otherwise: the part of main's CUDA C++ suite that run 60 had no time for (rest_filter.txt:
#   the CUDA filter minus the 149 tests run 60 passed).
# Usage (device): bash bench/results/2026-12-07_run61/device_script.sh OUTDIR [COMMIT]
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$1"; echo "GPU $gpu" > "$1/gpu.txt"
if [[ $gpu == *H200* ]]; then
  LIB_XZ=.prebuild/out/main/a/libflashtrain_torch.so.xz NS=flashtrain COMMIT="${2:-main}" DEADLINE=${DEADLINE:-570} \
    bash bench/results/2026-12-07_run57/device_script.sh "$1"
else
  STEP_LIMIT=${STEP_LIMIT:-400} scripts/gpu_ab.sh "$1" --prebuilt .prebuild/out/main \
    --tests "$(cat "$here/rest_filter.txt")" --race '' --deadline 480
fi
