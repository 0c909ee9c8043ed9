#!/bin/bash
# Session 16 call 2: staged dK/dV epilogue (this tree) vs main c9388f1; then a traced build's timeline.
mkdir -p /tmp/ab
BUILD_JOBS=16 STEP_LIMIT=150 timeout 400 scripts/gpu_ab.sh /tmp/ab .ab/main --label-b main --tests-on a --hdims '64;128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*' \
  --race '*Sm90DkDvEpilogue/bf16:*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16' \
  --bench '--seqlens 2048,8192 --dims 64,128 --dtypes bf16 --deterministic' --deadline 390 > /tmp/ab/gpu_ab.out 2>&1
tar czf "$1/s16c2.tgz" -C /tmp ab
# The timeline (bwd_trace_sm90.h) of the same tree, D 128 only.
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
t0=$SECONDS
{ cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    -DFLASHTRAIN_HDIMS=128 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir -DFLASHTRAIN_BWD_TRACE=ON \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  && timeout 200 cmake --build build-trace -j 16 --target flashtrain_torch; } > /tmp/ab/trace_build.log 2>&1
echo "trace build: exit $? ($((SECONDS - t0)) s)" >> /tmp/ab/gpu_ab.out
lib=$PWD/build-trace/python/flashtrain/libflashtrain_torch.so
for c in "2048" "2048 --causal" "8192"; do
  n=$(echo $c | tr -d ' -')
  FLASHTRAIN_BWD_TRACE=/tmp/ab/trace_$n.bin FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=python timeout 60 \
    python3 bench/profile_kernels.py --seq $c --dim 128 --iters 3 > /tmp/ab/trace_run_$n.log 2>&1
  python3 bench/bwd_trace.py /tmp/ab/trace_$n.bin --json /tmp/ab/trace_$n.json > /tmp/ab/trace_$n.txt 2>&1
done
tar czf "$1/s16c2.tgz" -C /tmp ab
cat /tmp/ab/summary.txt; cat /tmp/ab/ab.md; tail -3 /tmp/ab/gpu_ab.out; for f in /tmp/ab/trace_*.txt; do echo "== $f"; cat $f; done
