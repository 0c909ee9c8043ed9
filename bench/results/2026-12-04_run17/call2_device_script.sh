#!/usr/bin/env bash
# device call 2 (session 14): this tree (COMMIT) only: build with tests, CUDA tests, racecheck on the
# backward, the full grid, ncu of the backward and forward at D 128 8k, then the e2e paired run.
out=$1; commit=$2; cd "$(dirname "$0")/.."
mkdir -p $out/r
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
left() { echo $((570 - SECONDS)); }
{ cmake -S . -B build-a -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=64;128" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
    "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" && cmake --build build-a -j 16; } > $out/r/build.log 2>&1
echo "build rc $? at $SECONDS s"; grep -h "spill" $out/r/build.log | sort -u | head
timeout 170 build-a/flashtrain_tests --gtest_filter='*cuda*:*Cuda*:*CUDA*:*Sm90*' > $out/r/tests_cuda_$commit.log 2>&1
echo "tests rc $? at $SECONDS s: $(grep -c '\[       OK \]' $out/r/tests_cuda_$commit.log) OK, $(grep -c '\[  FAILED  \]' $out/r/tests_cuda_$commit.log) FAILED lines"; tail -3 $out/r/tests_cuda_$commit.log
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 build-a/flashtrain_tests \
  --gtest_filter='*Sm90ShapesMultiStep*:*DeterministicSelfAttentionBitwise*' > $out/r/racecheck_$commit.log 2>&1
echo "racecheck rc $? at $SECONDS s: $(grep 'RACECHECK SUMMARY' $out/r/racecheck_$commit.log)"
lib=$PWD/build-a/python/flashtrain/libflashtrain_torch.so
if (( $(left) > 110 )); then
  FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT=$commit PYTHONPATH=$PWD/python timeout $(( $(left) - 10 )) \
    python3 -u bench/bench_attention.py --json $out/r/bench.json --markdown $out/r/bench.md --deterministic --precision-high > $out/r/bench.log 2>&1
  echo "grid rc $? at $SECONDS s"
fi
if (( $(left) > 50 )); then
  FLASHTRAIN_TORCH_LIBRARY=$lib timeout $(( $(left) - 5 )) bench/ncu_kernels.sh $out/r/ncu 'bwd_kernel_sm90:8192:128:bf16:no' > $out/r/ncu.log 2>&1
  echo "ncu rc $? at $SECONDS s"; for f in $out/r/ncu/*.sass.csv; do python3 bench/ncu_stalls.py --top 30 $f > ${f%.sass.csv}_stalls.txt 2>&1; gzip $f; done; cat $out/r/ncu/ncu_summary.md 2>/dev/null
fi
if (( $(left) > 85 )); then
  FLASHTRAIN_COMMIT=$commit FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout $(( $(left) - 5 )) \
    python3 bench/e2e/run_e2e.py --mode paired --out-dir $out/r/e2e --budget-seconds $(( $(left) - 15 )) \
    --paired-rounds 16 --seqs 4k,8k,16k,32k > $out/r/e2e.log 2>&1
  echo "e2e rc $? at $SECONDS s"; grep -a "^| 4k\|^| 8k\|^| 16k\|^| 32k" $out/r/e2e/RESULTS.md 2>/dev/null
fi
grep "^| bf16 | 128 | 8192\|^| bf16 | 64 | 8192" $out/r/bench.md 2>/dev/null
echo "elapsed $SECONDS"
