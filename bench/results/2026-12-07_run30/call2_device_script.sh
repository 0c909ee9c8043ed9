#!/bin/bash
# Run 30 call 2: issue 7's paired end-to-end Llama run (flashtrain against torch SDPA in one
# process, ABBA rounds, S 4k-32k, bf16) on this tree, last run at 1e0fcce (run 18, H200). Builds
# the torch extension alone (D 128, sm_90a), then bench/e2e/run_e2e.py --mode paired.
# OUTDIR gets summary.txt, paired.json, e2e.md (run_e2e.py's RESULTS.md) and e2e.tgz (the rest).
# Usage (device, carry [".cutlass"]): COMMIT=<short sha> bash bench/results/2026-12-07_run30/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1; o=/tmp/e2e30; mkdir -p $o "$out"
t0=$SECONDS
note() { echo "$1" | tee -a "$out/summary.txt"; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
{ cmake -S . -B build-e2e -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    -DFLASHTRAIN_HDIMS=128 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
    "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  && cmake --build build-e2e -j 16 --target flashtrain_torch; } > $o/build.log 2>&1
note "build: exit $? ($((SECONDS - t0)) s)"
FLASHTRAIN_COMMIT=${COMMIT:-unknown} FLASHTRAIN_TORCH_LIBRARY=$PWD/build-e2e/python/flashtrain/libflashtrain_torch.so \
  PYTHONPATH=$PWD/python timeout 150 python3 -u bench/e2e/run_e2e.py --mode paired --out-dir $o/e2e \
  --budget-seconds 95 --paired-rounds 16 --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
note "e2e paired: exit $? ($((SECONDS - t0)) s)"
cp $o/e2e/paired.json "$out/" 2>/dev/null; cp $o/e2e/RESULTS.md "$out/e2e.md" 2>/dev/null
tar czf "$out/e2e.tgz" -C /tmp e2e30
tail -25 $o/e2e.log
