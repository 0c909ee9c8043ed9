#!/bin/bash
# Session 16 call 4: HEAD (1e0fcce) ncu of the sm90 backward, bf16 D 128 2k and 8k non-causal, and where its warps stall.
o=/tmp/n; mkdir -p $o; t0=$SECONDS
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
{ cmake -S . -B build-n -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    -DFLASHTRAIN_HDIMS=128 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  && timeout 170 cmake --build build-n -j 16 --target flashtrain_torch; } > $o/build.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-n/python/flashtrain/libflashtrain_torch.so timeout 120 bench/ncu_kernels.sh /tmp/ncu \
  bwd_kernel_sm90:2048:128:bf16:no bwd_kernel_sm90:8192:128:bf16:no > $o/ncu.log 2>&1
echo "ncu: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
cp /tmp/ncu/ncu_summary.md $o/ 2>/dev/null
for f in /tmp/ncu/*.sass.csv; do
  python3 bench/ncu_stalls.py "$f" --top 25 > $o/$(basename "$f" .sass.csv)_stalls.txt 2>&1
  gzip -c "$f" > $o/$(basename "$f").gz
done
for f in /tmp/ncu/*.txt; do cp "$f" $o/ ; done
tar czf "$1/s16c4.tgz" -C /tmp n
cat $o/summary.txt $o/ncu_summary.md; head -40 $o/*s2048*_stalls.txt
