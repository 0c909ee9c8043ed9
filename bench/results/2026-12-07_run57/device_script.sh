#!/bin/bash
# Run 57: on an H200, from a library scripts/prebuild.sh built (nothing compiled there): issue 6's
# full benchmark grid (bench_attention.py, S 2k-16k, D 64 / 128 / 256, deterministic and "high"
# columns), then issue 7's paired end-to-end Llama run (bench/e2e/run_e2e.py --mode paired) with
# the time left before DEADLINE seconds.
# Usage (device, carry [".prebuild/out"]):
#   LIB_XZ=.prebuild/out/run56/b/libflashtrain_torch.so.xz NS=flashtrain_b COMMIT=<label> DEADLINE=570 \
#     bash bench/results/2026-12-07_run57/device_script.sh OUTDIR
# NS: the library's torch.ops namespace (prebuild's B: flashtrain_b). E2E=0: the grid alone, with
# all the time. OUTDIR: summary.txt, bench.md, bench.json, the e2e RESULTS.md / paired.json /
# plots, logs.tgz.
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd); o=/tmp/r57; mkdir -p $o/lib
deadline=${DEADLINE:-570}
note() { echo "$1" | tee -a "$out/summary.txt"; }
note "GPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); library ${LIB_XZ:?} ($(python3 scripts/unxz.py "$LIB_XZ" $o/lib/libflashtrain_torch.so; echo unpacked: exit $?))"
export FLASHTRAIN_TORCH_LIBRARY=$o/lib/libflashtrain_torch.so FLASHTRAIN_TORCH_OP_NAMESPACE=${NS:-flashtrain}
export FLASHTRAIN_COMMIT="${COMMIT:-unknown}" PYTHONPATH=$PWD/python
grid_limit=$((deadline / 2))
[[ ${E2E:-1} == 0 ]] && grid_limit=$((deadline - SECONDS - 10))
timeout $grid_limit python3 -u bench/bench_attention.py --seqlens 2048,4096,8192,16384 \
  --deterministic --precision-high --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
note "grid: exit $? ($SECONDS s)"
cp $o/bench.md $o/bench.json "$out/" 2>/dev/null
left=$((deadline - SECONDS - 25))
if [[ ${E2E:-1} == 0 ]] || (( left < 120 )); then
  note "e2e: skipped ($left s left)"; tar czf "$out/logs.tgz" -C /tmp r57/bench.log; exit 0
fi
note "e2e: $left s"
timeout $((left + 20)) python3 -u bench/e2e/run_e2e.py --mode paired --out-dir $o/e2e --budget-seconds $left \
  --paired-rounds 16 --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
note "e2e paired: exit $? ($SECONDS s)"
tail -25 $o/e2e.log | tee -a "$out/summary.txt"
cp $o/e2e/RESULTS.md $o/e2e/paired.json $o/e2e/*.png "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp r57/bench.log r57/e2e.log
