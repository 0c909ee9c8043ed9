#!/bin/bash
# Session 19 call 2: this tree, D 256 only: the CUDA tests that now cover the split-D backward
# (Sm90SplitDMasksAndShapes, the guard's CudaNumerics cases at D 256, the CudaBackward suite),
# racecheck on the new test, then Nsight Compute on the split-D kernel (bf16, S 8k, causal and not)
# with its stall table.
# Usage: COMMIT=<sha> bash call2_device_script.sh OUTDIR
o=/tmp/r; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s19c2.tgz" -C /tmp r; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
{ cmake -S . -B build-h -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=256" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    -DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest \
  && cmake --build build-h -j 16; } > $o/build.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
grep -h "spill" $o/build.log | sort -u | head
timeout 200 build-h/flashtrain_tests --gtest_filter='*CudaBackward*:*CudaNumerics*:*Accuracy*cuda*:*Sm90*:*MaskedRows*cuda*' > $o/tests.log 2>&1
echo "tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' '); $((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 build-h/flashtrain_tests \
  --gtest_filter='*Sm90SplitDMasksAndShapes/bf16' > $o/racecheck.log 2>&1
echo "racecheck: exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log); $((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
lib=$PWD/build-h/python/flashtrain/libflashtrain_torch.so
FLASHTRAIN_TORCH_LIBRARY=$lib timeout $((560 - SECONDS)) bench/ncu_kernels.sh $o/ncu bwd_split_kernel_sm90:8192:256:bf16:no \
  bwd_split_kernel_sm90:8192:256:bf16:yes > $o/ncu.log 2>&1
echo "ncu: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
python3 bench/ncu_stalls.py $o/ncu/bwd_split_kernel_sm90_s8192_d256_bf16_full.sass.csv --top 40 > $o/stalls_full.txt 2>&1
python3 bench/ncu_stalls.py $o/ncu/bwd_split_kernel_sm90_s8192_d256_bf16_full.sass.csv --opcodes 25 > $o/opcodes_full.txt 2>&1
pack "$1"
cat $o/summary.txt; grep -E "FAILED|Failure" $o/tests.log | head -20; cat $o/ncu/ncu_summary.md; head -45 $o/stalls_full.txt
