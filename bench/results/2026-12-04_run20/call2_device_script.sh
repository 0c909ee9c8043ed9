#!/bin/bash
# Session 18 call 2 (diagnosis, main ce3bcbd): why the bf16 D 128 backward trails the fp16 one most
# at short and causal shapes (run 19 grid, 4k causal: 353 against 406 TFLOP/s; 16k non-causal: 539
# against 544). The per-block timeline (bwd_trace_sm90.h) of both dtypes at 2k, 4k causal and 16k,
# and ncu of both at 4k causal. Torch extension only, D 128 only.
o=/tmp/r2; mkdir -p $o
t0=$SECONDS
pack() { tar czf "$1/s18c2.tgz" -C /tmp r2; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
build() {  # DIR TRACE
  cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    -DFLASHTRAIN_HDIMS=128 -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON -DTorch_DIR=$torch_dir -DFLASHTRAIN_BWD_TRACE=$2 \
    -DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  && timeout 200 cmake --build $1 -j 8 --target flashtrain_torch
}
build build-trace ON > $o/build_trace.log 2>&1 &
pid=$!
build build-n OFF > $o/build_n.log 2>&1
echo "build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
wait $pid
echo "trace build: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
lib=$PWD/build-trace/python/flashtrain/libflashtrain_torch.so
for dt in bf16 fp16; do
  for c in "2048" "4096 --causal" "16384"; do
    n=${dt}_$(echo $c | tr -d ' -')
    FLASHTRAIN_BWD_TRACE=$o/trace_$n.bin FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=python timeout 60 \
      python3 bench/profile_kernels.py --seq $c --dim 128 --dtype $dt --iters 3 > $o/trace_run_$n.log 2>&1
    python3 bench/bwd_trace.py $o/trace_$n.bin --json $o/trace_$n.json > $o/trace_$n.txt 2>&1
    rm -f $o/trace_$n.bin
  done
done
echo "traces: ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
pack "$1"
FLASHTRAIN_TORCH_LIBRARY=$PWD/build-n/python/flashtrain/libflashtrain_torch.so timeout $((400 - SECONDS)) \
  bench/ncu_kernels.sh $o/ncu bwd_kernel_sm90:4096:128:bf16:yes bwd_kernel_sm90:4096:128:fp16:yes > $o/ncu.log 2>&1
echo "ncu: exit $? ($((SECONDS - t0)) s)" | tee -a $o/summary.txt
for f in $o/ncu/*.sass.csv; do python3 bench/ncu_stalls.py $f --top 40 > ${f%.sass.csv}.stalls.txt 2>&1; gzip $f; done
rm -f $o/ncu/*.ncu-rep $o/ncu/*.raw.txt
pack "$1"
cat $o/summary.txt; for f in $o/trace_*.txt; do echo "== $f"; cat $f; done; cat $o/ncu/ncu_summary.md
