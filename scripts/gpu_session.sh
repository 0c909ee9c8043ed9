#!/usr/bin/env bash
# One device call does everything: scripts/gpu_check.sh (build, C++ tests on CUDA, pytest incl.
# transformers, the checkpoint bench, the sm90 forward check, the sm80 path tests, benchmark,
# doctor, memcheck), then the CPU benchmark against torch (not with --full), or the end-to-end
# Llama benchmark.
# Logs go to a scratch folder and come back as OUTDIR/logs.tgz (the device returns at most 8
# files); the summary is printed last.
# Usage: scripts/gpu_session.sh OUTDIR [--full] [--part cpp|python] [--e2e SECONDS]
#   --full         all head dims and the full bench grid
#   --part         only gpu_check's C++ checks or its Python tests and benchmarks (gpu_check.sh
#                  --part); a full run is two calls, cpp then python, on the same (warm) machine
#   --e2e SECONDS  after gpu_check, bench/e2e/run_e2e.py with that budget (bf16 sweep at 2k-16k
#                  plus short loss curves) instead of the CPU benchmark; results in OUTDIR/e2e.tgz
# Environment: SESSION_TIMEOUT (seconds for gpu_check, default 480), STEP_TIMEOUT (per step, 150).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || -z "${1:-}" ]] && { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
quick=--quick
part=all
e2e=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --full) quick="" ;;
    --part) part=$2; shift ;;
    --e2e) e2e=$2; shift ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
logs=/tmp/ft_logs
rm -rf "$logs" && mkdir -p "$logs"
# The device copy of the tree may carry a stale .git: the caller passes FLASHTRAIN_COMMIT when it can.
export PYTHONUNBUFFERED=1 FLASHTRAIN_COMMIT=${FLASHTRAIN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
build=build-gpu
finish() {
  cp "$logs"/gpu_check/{bench.md,bench.json,summary.txt,guard_cost.md} "$out/" 2>/dev/null
  cp "$logs/cpu.md" "$logs/cpu_amx.md" "$out/" 2>/dev/null
  tar czf "$out/logs.tgz" -C /tmp ft_logs
  [[ -d /tmp/ft_e2e ]] && tar czf "$out/e2e.tgz" -C /tmp ft_e2e
}
trap finish EXIT

STEP_TIMEOUT=${STEP_TIMEOUT:-150} BUILD_DIR=$build timeout "${SESSION_TIMEOUT:-480}" \
  scripts/gpu_check.sh "$logs/gpu_check" $quick --part "$part" > "$logs/gpu_check.log" 2>&1
echo "gpu_check exit $?" >> "$logs/gpu_check.log"
lib=$PWD/$build/python/flashtrain/libflashtrain_torch.so
if [[ -f $lib && $e2e -gt 0 ]]; then
  rm -rf /tmp/ft_e2e
  FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout $((e2e + 60)) \
    python3 bench/e2e/run_e2e.py --mode all --out-dir /tmp/ft_e2e --budget-seconds "$e2e" \
    --lc-budget-seconds $((e2e / 3)) --dtypes bf16 --checkpoint none --seqs 2k,4k,8k,16k > "$logs/e2e.log" 2>&1
elif [[ -f $lib && $part != cpp && -n $quick ]]; then  # a --full run spends the time on the grid
  FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout 60 \
    python3 bench/bench_cpu.py --reps 3 --markdown "$logs/cpu.md" > "$logs/cpu_bench.log" 2>&1
  FLASHTRAIN_CPU_AMX=1 FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout 60 \
    python3 bench/bench_cpu.py --reps 3 --dtypes bf16 --markdown "$logs/cpu_amx.md" > "$logs/cpu_amx_bench.log" 2>&1
fi
tail -40 "$logs/gpu_check.log"
echo "--- cpu bench"; cat "$logs/cpu.md" 2>/dev/null || tail -5 "$logs/cpu_bench.log"
[[ -f "$logs/cpu_amx.md" ]] && { echo "--- cpu bench, FLASHTRAIN_CPU_AMX=1"; cat "$logs/cpu_amx.md"; }
[[ -f /tmp/ft_e2e/RESULTS.md ]] && { echo "--- e2e"; cat /tmp/ft_e2e/RESULTS.md | head -60; }
