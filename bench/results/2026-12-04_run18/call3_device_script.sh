#!/bin/bash
# Session 16 call 3: HEAD (1e0fcce) alone: build, full grid, e2e paired run, then the CUDA C++ suite.
sha=1e0fcce
o=/tmp/r; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s16c3.tgz" -C /tmp r; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
{ cmake -S . -B build-h -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=64;128" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    -DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest \
  && cmake --build build-h -j 16; } > $o/build.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
lib=$PWD/build-h/python/flashtrain/libflashtrain_torch.so
FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT=$sha PYTHONPATH=python timeout 150 python3 -u bench/bench_attention.py \
  --json $o/bench.json --markdown $o/bench.md --deterministic --precision-high > $o/bench.log 2>&1
echo "grid: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
FLASHTRAIN_COMMIT=$sha FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=python timeout 120 python3 bench/e2e/run_e2e.py --mode paired \
  --out-dir $o/e2e --budget-seconds 95 --paired-rounds 16 --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
echo "e2e: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
left=$((540 - SECONDS))
if (( left > 30 )); then
  timeout $left build-h/flashtrain_tests --gtest_filter='*cuda*:*Cuda*:*Sm90*' > $o/tests_cuda.log 2>&1
  echo "CUDA tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests_cuda.log | tr '\n' ' '); $((SECONDS - t0)) s)" | tee -a $o/summary.txt
fi
pack "$1"
cat $o/summary.txt; cat $o/bench.md | head -60; tail -30 $o/e2e.log
