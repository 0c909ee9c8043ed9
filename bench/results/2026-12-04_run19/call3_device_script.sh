#!/bin/bash
# Session 17 call 3: HEAD (4473c5c) alone: build with tests and the torch extension; the full grid;
# the D 64 forward's 128- against 192-key tiles at 2k / 4k in one process; the CUDA C++ suite.
sha=4473c5c
o=/tmp/r; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s17c3.tgz" -C /tmp r; }
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
PYTHONPATH=$PWD/bench timeout 60 python3 bench/ab_builds.py --a $lib --b $lib --labels t128,t192 \
  --env-a FLASHTRAIN_FWD_KEY_TILE=128 --env-b FLASHTRAIN_FWD_KEY_TILE=long --dims 64 --seqlens 2048,4096 \
  --dtypes bf16,fp16 --markdown $o/ab_keytile_d64.md --json $o/ab_keytile_d64.json > $o/ab_keytile.log 2>&1
echo "key-tile A/B: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
left=$((555 - SECONDS))
if (( left > 30 )); then
  timeout $left build-h/flashtrain_tests --gtest_filter='*cuda*:*Cuda*:*Sm90*' > $o/tests_cuda.log 2>&1
  echo "CUDA tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests_cuda.log | tr '\n' ' '); $((SECONDS - t0)) s)" | tee -a $o/summary.txt
fi
pack "$1"
cat $o/summary.txt; cat $o/ab_keytile_d64.md; grep -E "FAILED|Failure" $o/tests_cuda.log | head
