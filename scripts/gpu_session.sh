#!/usr/bin/env bash
# One device call does everything: scripts/gpu_check.sh (build, C++ tests on CUDA, pytest incl.
# transformers, the sm90 forward check, the sm80 forward tests, benchmark, doctor, memcheck) and
# then the CPU benchmark against torch. Logs go to a scratch folder and come back as
# OUTDIR/logs.tgz (the device returns at most 8 files); the summary is printed last.
# Usage: scripts/gpu_session.sh OUTDIR [--full]   (--full: all head dims and the full bench grid)
# Environment: SESSION_TIMEOUT (seconds for gpu_check, default 480), STEP_TIMEOUT (per step, 150).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || -z "${1:-}" ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
quick=--quick
[[ "${2:-}" == "--full" ]] && quick=""
logs=/tmp/ft_logs
rm -rf "$logs" && mkdir -p "$logs"
export PYTHONUNBUFFERED=1 FLASHTRAIN_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
build=build-gpu
finish() {
  cp "$logs"/gpu_check/{bench.md,bench.json,summary.txt} "$out/" 2>/dev/null
  cp "$logs/cpu.md" "$out/" 2>/dev/null
  tar czf "$out/logs.tgz" -C /tmp ft_logs
}
trap finish EXIT

STEP_TIMEOUT=${STEP_TIMEOUT:-150} BUILD_DIR=$build timeout "${SESSION_TIMEOUT:-480}" \
  scripts/gpu_check.sh "$logs/gpu_check" $quick > "$logs/gpu_check.log" 2>&1
echo "gpu_check exit $?" >> "$logs/gpu_check.log"
lib=$PWD/$build/python/flashtrain/libflashtrain_torch.so
if [[ -f $lib ]]; then
  FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout 60 \
    python3 bench/bench_cpu.py --reps 3 --markdown "$logs/cpu.md" > "$logs/cpu_bench.log" 2>&1
fi
tail -40 "$logs/gpu_check.log"
echo "--- cpu bench"; cat "$logs/cpu.md" 2>/dev/null || tail -5 "$logs/cpu_bench.log"
