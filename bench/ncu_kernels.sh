#!/usr/bin/env bash
# Nsight Compute profile of flashtrain's Hopper main kernels on shapes of the benchmark grid: what
# limits each (tensor-pipe and shared-memory throughput, DRAM, registers, occupancy, warp stall
# reasons and the instructions they stall on). Per (kernel, shape) in OUTDIR: the report
# (.ncu-rep), its details and raw pages (.txt, .raw.txt) and per-instruction table (.sass.csv);
# OUTDIR/ncu_summary.md is one table of the headline numbers (bench/ncu_summary.py).
#
# Usage: bench/ncu_kernels.sh OUTDIR [CASE ...]
#   CASE    kernel:seq:dim:dtype:causal[:skip[:det]], e.g. bwd_kernel_sm90:8192:128:bf16:no: the
#           kernel (a regex of its name), the shape, how many of its launches to skip before the
#           profiled one (default 1: the first pays for the caches), and "det" for the
#           deterministic backward (e.g. bwd_kernel_sm90:8192:128:bf16:no:1:det; the name gets
#           _det). Default: the sm90 fwd and bwd at D 64/128, S 1k/8k, and the split-D backward
#           of D 256 at 8k.
# Environment: FLASHTRAIN_TORCH_LIBRARY (the extension to profile; default build-gpu's),
#              NCU (the ncu binary), NCU_SOURCE=0 to skip the per-instruction (SASS) table.
# Clocks are left to the GPU (--clock-control none), as in the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || -z "${1:-}" ]] && { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(bwd_kernel_sm90:8192:128:bf16:no fwd_kernel_sm90:8192:128:bf16:no
  bwd_kernel_sm90:1024:64:bf16:yes bwd_kernel_sm90:8192:64:bf16:no bwd_kernel_sm90:1024:128:bf16:yes
  bwd_split_kernel_sm90:8192:256:bf16:no)
ncu=${NCU:-ncu}
export FLASHTRAIN_TORCH_LIBRARY=${FLASHTRAIN_TORCH_LIBRARY:-$PWD/build-gpu/python/flashtrain/libflashtrain_torch.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
n=0
for c in "${cases[@]}"; do
  n=$((n + 1))
  IFS=: read -r kernel seq dim dtype causal skip mode <<< "$c"
  [[ -z "${mode:-}" || $mode == det ]] || { echo "ncu_kernels: case $c: the 7th field is det or nothing" >&2; exit 2; }
  name="${kernel//[^A-Za-z0-9_]/_}_s${seq}_d${dim}_${dtype}_$([[ $causal == yes ]] && echo causal || echo full)${mode:+_$mode}"
  echo "[$n/${#cases[@]}] $name" >&2
  flags=(--seq "$seq" --dim "$dim" --dtype "$dtype" --iters 3)
  [[ $causal == yes ]] && flags+=(--causal)
  [[ ${mode:-} == det ]] && flags+=(--deterministic)
  "$ncu" --clock-control none --kernel-name "regex:$kernel" --launch-skip "${skip:-1}" --launch-count 1 \
    --set full --import-source no -f --export "$out/$name" \
    python3 bench/profile_kernels.py "${flags[@]}" > "$out/$name.log" 2>&1
  rc=$?
  "$ncu" --import "$out/$name.ncu-rep" --page details --print-units base > "$out/$name.txt" 2>&1
  "$ncu" --import "$out/$name.ncu-rep" --page raw --print-units base > "$out/$name.raw.txt" 2>&1
  [[ ${NCU_SOURCE:-1} == 1 ]] && "$ncu" --import "$out/$name.ncu-rep" --page source --print-source sass --csv \
    > "$out/$name.sass.csv" 2>&1
  echo "[$n/${#cases[@]}] $name: ncu exit $rc" >&2
done
python3 bench/ncu_summary.py "$out" --markdown "$out/ncu_summary.md"
