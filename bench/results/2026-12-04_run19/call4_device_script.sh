#!/bin/bash
# Session 17 call 4: why the bf16 backward runs 6-10% below the fp16 one (run 19 grid, D 64 8k:
# 404 against 450 TFLOP/s; cuDNN: 444 / 438): ncu of both sm90 backward kernels at D 64, 8k,
# non-causal, on HEAD. Torch extension only, D 64 only, to fit the session's last device minutes.
o=/tmp/r4; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s17c4.tgz" -C /tmp r4; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
{ cmake -S . -B build-n -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    -DFLASHTRAIN_HDIMS=64 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  && timeout 150 cmake --build build-n -j 16 --target flashtrain_torch; } > $o/build.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-n/python/flashtrain/libflashtrain_torch.so timeout $((215 - SECONDS)) \
  bench/ncu_kernels.sh $o/ncu bwd_kernel_sm90:8192:64:bf16:no bwd_kernel_sm90:8192:64:fp16:no > $o/ncu.log 2>&1
echo "ncu: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
for f in $o/ncu/*.sass.csv; do python3 bench/ncu_stalls.py $f --top 40 > ${f%.sass.csv}.stalls.txt 2>&1; gzip $f; done
rm -f $o/ncu/*.ncu-rep $o/ncu/*.raw.txt
pack "$1"
cat $o/summary.txt; cat $o/ncu/ncu_summary.md
