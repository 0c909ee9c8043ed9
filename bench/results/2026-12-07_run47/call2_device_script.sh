#!/bin/bash
# Run 47 call 2: main's kernels as they stand, in one call: (1) the D 128 rows of the grid (bf16
# and fp16, S 8k / 16k; no call has timed D 128 since run 45 changed its forward's spills), then
# (2) Nsight Compute on the main kernels of the benchmark grid's S 8k shapes, most wanted first,
# each only while the deadline leaves room (the what-limits-each table of issue 6, in numbers).
# OUTDIR: summary.txt, bench.md, bench.json, ncu_summary.md, ncu.tgz (raw pages, logs).
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<sha> DEADLINE=<s> bash bench/results/2026-12-07_run47/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd); o=/tmp/r47c2; mkdir -p $o/ncu
deadline=${DEADLINE:-450}
note() { echo "$1" | tee -a "$out/summary.txt"; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-g -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=64;128;256" -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  > $o/configure.log 2>&1
cmake --build build-g -j 16 --target flashtrain_torch > $o/build.log 2>&1
note "build (extension, D 64 / 128 / 256): exit $? ($SECONDS s)"
export FLASHTRAIN_TORCH_LIBRARY=$PWD/build-g/python/flashtrain/libflashtrain_torch.so
FLASHTRAIN_COMMIT="${COMMIT:-unknown}" PYTHONPATH=$PWD/python timeout $((deadline - 30 - SECONDS)) \
  python3 -u bench/bench_attention.py --dims 128 --seqlens 8192,16384 --deterministic --precision-high \
  --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
note "grid (D 128, S 8k / 16k): exit $? ($SECONDS s)"
cp $o/bench.md $o/bench.json "$out/" 2>/dev/null
for c in bwd_kernel_sm90:8192:128:bf16:no bwd_wide_kernel_sm90:8192:256:bf16:yes fwd_kernel_sm90:8192:128:bf16:no \
         bwd_kernel_sm90:8192:128:bf16:yes bwd_kernel_sm90:8192:64:bf16:no bwd_wide_kernel_sm90:8192:256:bf16:no \
         fwd_kernel_sm90:8192:256:bf16:no fwd_kernel_sm90:8192:64:bf16:no fwd_kernel_sm90:8192:128:bf16:yes; do
  left=$((deadline - SECONDS))
  (( left < 70 )) && { note "ncu: $c not run ($left s left)"; continue; }
  NCU_SOURCE=0 timeout $((left - 20)) bash bench/ncu_kernels.sh $o/ncu "$c" > $o/ncu/last.log 2>&1
  note "ncu $c: exit $? ($SECONDS s)"
done
python3 bench/ncu_summary.py $o/ncu --markdown "$out/ncu_summary.md" > /dev/null 2>&1
tar czf "$out/ncu.tgz" -C $o/ncu --exclude='*.ncu-rep' . 2>/dev/null
tar czf "$out/logs.tgz" -C $o configure.log bench.log 2>/dev/null
cat "$out/summary.txt"; cat "$out/ncu_summary.md" 2>/dev/null; head -30 "$out/bench.md" 2>/dev/null
