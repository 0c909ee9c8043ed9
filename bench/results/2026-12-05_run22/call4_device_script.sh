#!/bin/bash
# Run 22 call 4: is the D 256 split-D backward bound by the L2's reductions? Builds the torch
# extension (sm_90a, head dims HDIMS, default 256), profiles the CASEs (bench/ncu_kernels.sh's
# form; default the split-D backward at bf16 S 8k non-causal) with --set full and prints the L2 /
# memory lines of each report.
# Usage (device, carry [".cutlass"]): [HDIMS='128'] bash bench/results/2026-12-05_run22/call4_device_script.sh OUTDIR [CASE ...]
#   e.g. HDIMS=128 ... OUTDIR bwd_kernel_sm90:8192:128:bf16:no
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=$1; shift; t0=$SECONDS
cases=("$@"); (( ${#cases[@]} )) || cases=(bwd_split_kernel_sm90:8192:256:bf16:no)
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-n -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=${HDIMS:-256}" -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  > $o/configure.log 2>&1
cmake --build build-n -j 16 --target flashtrain_torch > $o/build.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)"
NCU_SOURCE=0 FLASHTRAIN_TORCH_LIBRARY=$PWD/build-n/python/flashtrain/libflashtrain_torch.so timeout 200 \
  bench/ncu_kernels.sh /tmp/ncu "${cases[@]}" > $o/ncu.log 2>&1
echo "ncu: exit $? ($((SECONDS - t0)) s)"
cp /tmp/ncu/ncu_summary.md $o/ 2>/dev/null
for f in /tmp/ncu/*[^w].txt; do
  grep -iE "L2|Memory Throughput|DRAM Throughput|L1/TEX|Mem Busy|Max Bandwidth|Mem Pipes" "$f" | head -60 > "$o/$(basename "$f" .txt)_memory.txt"
done
for f in /tmp/ncu/*.raw.txt; do
  grep -E "lts__t_(sectors|requests)(_srcunit_tex)?_op_(red|atom|read|write)\.sum |lts__throughput|lts__t_sectors\.sum |lts__t_bytes\.sum |lts__d_|lts__average|dram__bytes_(read|write)\.sum |gpu__time_duration\.sum " "$f" | head -80 > "$o/$(basename "$f" .raw.txt)_lts_raw.txt"
done
ls /tmp/ncu; cat $o/ncu_summary.md; cat $o/*_memory.txt | head -40; cat $o/*_lts_raw.txt | head -60
