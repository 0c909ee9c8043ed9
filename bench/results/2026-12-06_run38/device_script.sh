#!/bin/bash
# Run 38: issue 7's paired end-to-end Llama run (bf16, S 4k-32k) on main after runs 34 and 36
# landed (run 36: the causal forward as a persistent grid, 4-7% faster at D 128 2k / 4k causal):
# builds the torch extension (D 128, the Llama shape) and runs bench/e2e/run_e2e.py --mode paired
# with the time left before DEADLINE seconds.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<sha> DEADLINE=<s> bash bench/results/2026-12-06_run38/device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd); o=/tmp/e2e38; mkdir -p $o
deadline=${DEADLINE:-420}
note() { echo "$1" | tee -a "$out/summary.txt"; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-e -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=128" -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  > $o/configure.log 2>&1
cmake --build build-e -j 16 --target flashtrain_torch > $o/build.log 2>&1
note "build (extension, D 128): exit $? ($SECONDS s)"
left=$((deadline - SECONDS - 25))
note "e2e: $left s"
FLASHTRAIN_COMMIT="${COMMIT:-unknown}" FLASHTRAIN_TORCH_LIBRARY=$PWD/build-e/python/flashtrain/libflashtrain_torch.so \
  PYTHONPATH=$PWD/python timeout $((left + 20)) python3 -u bench/e2e/run_e2e.py \
  --mode paired --out-dir $o/e2e --budget-seconds $left --paired-rounds 16 --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
note "e2e paired: exit $? ($SECONDS s)"
tail -25 $o/e2e.log | tee -a "$out/summary.txt"
cp $o/e2e/RESULTS.md $o/e2e/paired.json $o/e2e/*.png "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp e2e38
