#!/bin/bash
# Run 42 call 2: the D 256 rows of the benchmark grid on main after the wide kernel became the
# default mode's D 256 backward (8066a64): flashtrain against cuDNN and FlashAttention-2, bf16 and
# fp16, S 2k-16k, causal and not, with the deterministic and precision "high" columns. Only the
# D 256 extension is built (the device time left allowed no more).
# OUTDIR: summary.txt, bench.md, bench.json, logs.tgz.
# Usage (device, carry [".cutlass"]): COMMIT=<sha> DEADLINE=<s> bash bench/results/2026-12-06_run42/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd); o=/tmp/g42; mkdir -p $o
deadline=${DEADLINE:-300}
note() { echo "$1" | tee -a "$out/summary.txt"; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-g -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=256" -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  > $o/configure.log 2>&1
cmake --build build-g -j 16 --target flashtrain_torch > $o/build.log 2>&1
note "build (extension, D 256): exit $? ($SECONDS s)"
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-g/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="${COMMIT:-unknown}" \
  PYTHONPATH=$PWD/python timeout $((deadline - 15 - SECONDS)) python3 -u bench/bench_attention.py --seqlens 2048,4096,8192,16384 \
  --dims 256 --dtypes bf16,fp16 --deterministic --precision-high --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
note "grid (D 256): exit $? ($SECONDS s)"
cp $o/bench.md $o/bench.json "$out/" 2>/dev/null
tar czf "$out/logs.tgz" --exclude=build.log -C /tmp g42
cat "$out/summary.txt"; cat "$out/bench.md" 2>/dev/null
