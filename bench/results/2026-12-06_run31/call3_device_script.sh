#!/bin/bash
# Run 31 call 3: the benchmark grid of main after call 1's landing (bf16 D 128 dQ in flight)
# against cuDNN and FlashAttention-2 (D 64 / 128 / 256, S 2k-16k, deterministic and precision
# "high" columns), then, with the time left, the CUDA C++ tests of the same tree.
# OUTDIR: summary.txt, bench.md, bench.json, logs.tgz.
# HDIMS (default "64;128;256") and GRID (default "--seqlens 2048,4096,8192,16384") narrow the grid.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<sha> DEADLINE=<s> [HDIMS=..] [GRID=..] bash bench/results/2026-12-06_run31/call3_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd); o=/tmp/g31; mkdir -p $o
deadline=${DEADLINE:-500}
note() { echo "$1" | tee -a "$out/summary.txt"; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-g -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=${HDIMS:-64;128;256}" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" > $o/configure.log 2>&1
cmake --build build-g -j 16 --target flashtrain_torch > $o/build.log 2>&1
note "build (extension): exit $? ($SECONDS s)"
# The tests build on 6 cores behind the grid (the grid's timings are GPU-bound; its host side is light).
(cmake --build build-g -j 6 --target flashtrain_tests > $o/build_tests.log 2>&1; echo $? > $o/build_tests.rc) &
tests_pid=$!
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-g/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="${COMMIT:-unknown}" \
  PYTHONPATH=$PWD/python timeout $((deadline - 60 - SECONDS)) python3 -u bench/bench_attention.py ${GRID:---seqlens 2048,4096,8192,16384} \
  --deterministic --precision-high --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
note "grid: exit $? ($SECONDS s)"
cp $o/bench.md $o/bench.json "$out/" 2>/dev/null
wait $tests_pid
note "build (tests): exit $(cat $o/build_tests.rc) ($SECONDS s)"
left=$((deadline - SECONDS))
if (( left > 15 )); then
  timeout $left build-g/flashtrain_tests --gtest_filter='*cuda*:*Cuda*:*CUDA*:*Sm90*' > $o/tests.log 2>&1
  note "tests: exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok, $(grep -c '^\[  FAILED  \] [A-Z]' $o/tests.log) failed before the limit of $left s) ($SECONDS s)"
  grep -E "^\[  FAILED  \]|Failure" $o/tests.log | head -20 >> "$out/summary.txt"
fi
tar czf "$out/logs.tgz" --exclude=build.log --exclude=build_tests.log -C /tmp g31
cat "$out/summary.txt"; head -60 "$out/bench.md" 2>/dev/null
