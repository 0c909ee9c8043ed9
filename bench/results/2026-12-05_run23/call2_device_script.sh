#!/bin/bash
# Run 23 call 2: the landed tree (D 256 backward as cluster pairs by default, if call 1 held) on the
# H200: build (sm_90a, D 64;128;256, tests and the torch extension), the CUDA C++ tests, racecheck,
# then the benchmark grid against cuDNN and FlashAttention-2 (all three head dims, deterministic and
# precision "high" columns) until the deadline.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<HEAD> bash bench/results/2026-12-05_run23/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-v -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=64;128;256" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" > $o/configure.log 2>&1
cmake --build build-v -j 16 --target flashtrain_tests flashtrain_torch > $o/build.log 2>&1
note "build: exit $? ($((SECONDS - t0)) s)"
grep -h "spill" $o/build.log | sort -u | head -10 >> $o/summary.txt
timeout ${TESTS_S:-170} build-v/flashtrain_tests --gtest_filter='*cuda*:*Cuda*:*CUDA*:*Sm90*' > $o/tests.log 2>&1
note "tests: exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok, $(grep -c '^\[  FAILED  \] [A-Z]' $o/tests.log) failed before the timeout; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-400)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure" $o/tests.log | head -20 >> $o/summary.txt
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 build-v/flashtrain_tests \
  --gtest_filter='*Sm90ClusterPairMatchesSingleBlocks/bf16:*Sm90SplitDMasksAndShapes/bf16' > $o/racecheck.log 2>&1
note "racecheck: exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log)) ($((SECONDS - t0)) s)"
left=$((560 - SECONDS))
if (( left > 60 )); then
  FLASHTRAIN_TORCH_LIBRARY=$PWD/build-v/python/flashtrain/libflashtrain_torch.so FLASHTRAIN_COMMIT="${COMMIT:-unknown}" \
    PYTHONPATH=$PWD/python timeout $left python3 -u bench/bench_attention.py --seqlens 2048,4096,8192,16384 \
    --deterministic --precision-high --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
  note "grid: exit $? ($((SECONDS - t0)) s)"
fi
tar czf "$1/run23_call2.tgz" --exclude=v/build.log -C /tmp v; cp $o/summary.txt $o/bench.md $o/bench.json "$1/" 2>/dev/null
cat $o/summary.txt; tail -5 $o/tests.log; cat $o/bench.md 2>/dev/null | head -60
