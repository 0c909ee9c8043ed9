#!/bin/bash
# Session 18 call 3: this tree against main (ce3bcbd in .ab/main; same kernels as a47be61): the sm90
# backward writes dK / dV as soon as its loop is left, before the last dQ (all head dims, both
# modes), and bf16's K copy / maxima move from the consumers' prologue to the statistics warps.
# Then the per-block timeline of this tree (D 128, bf16 and fp16, 2k and 4k causal) for attribution.
o=/tmp/ab; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s18c3.tgz" -C /tmp ab; }
BUILD_JOBS=16 STEP_LIMIT=170 timeout 470 scripts/gpu_ab.sh $o .ab/main --label-b main --tests-on a --hdims '64;128' \
  --tests '*CudaBackward*:*Sm90*:*Deterministic*cuda*:*MaskedRows*cuda*:*CudaNumerics*' \
  --race '*Sm90FewStepsPerBlock/bf16:*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*Sm90ShapesMultiStep/fp16' \
  --bench '--seqlens 2048,4096,16384 --dims 64,128 --dtypes bf16,fp16 --deterministic' --deadline 460 > $o/gpu_ab.out 2>&1
echo "gpu_ab: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
pack "$1"
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
if (( SECONDS < 430 )); then
  { cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
      -DFLASHTRAIN_HDIMS=128 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir -DFLASHTRAIN_BWD_TRACE=ON \
      -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    && timeout $((540 - SECONDS)) cmake --build build-trace -j 16 --target flashtrain_torch; } > $o/build_trace.log 2>&1
  echo "trace build: exit $? ($((SECONDS - t0)) s)" >> $o/times.txt
  lib=$PWD/build-trace/python/flashtrain/libflashtrain_torch.so
  for dt in bf16 fp16; do
    for c in "2048" "4096 --causal"; do
      (( SECONDS > 560 )) && break
      n=${dt}_$(echo $c | tr -d ' -')
      FLASHTRAIN_BWD_TRACE=$o/trace_$n.bin FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=python timeout 30 \
        python3 bench/profile_kernels.py --seq $c --dim 128 --dtype $dt --iters 3 > $o/trace_run_$n.log 2>&1
      python3 bench/bwd_trace.py $o/trace_$n.bin --json $o/trace_$n.json > $o/trace_$n.txt 2>&1
      rm -f $o/trace_$n.bin
    done
  done
fi
pack "$1"
cat $o/summary.txt $o/times.txt; cat $o/ab.md; for f in $o/trace_*.txt; do echo "== $f"; cat $f; done
