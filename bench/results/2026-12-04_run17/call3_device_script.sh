#!/usr/bin/env bash
# device call 3 (session 14): this tree (COMMIT) only: build with tests, backward tests, racecheck,
# the full grid, then the e2e paired run; everything under $OUT/r, packed into one tar.
out=$1; commit=$2; cd "$(dirname "$0")/.."
r=/tmp/r; mkdir -p $r
pack() { tar czf $out/r.tgz -C /tmp r; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
left() { echo $((470 - SECONDS)); }
{ cmake -S . -B build-a -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=64;128" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
    "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" && cmake --build build-a -j 16; } > $r/build.log 2>&1
echo "build rc $? at $SECONDS s"; grep -h "spill" $r/build.log | grep sm90 | sort -u | head
timeout 120 build-a/flashtrain_tests --gtest_filter='*CudaBackward*:*Deterministic*cuda*:*Accuracy*cuda*:*MaskedRows*cuda*:*CudaNumerics*' > $r/tests_bwd_$commit.log 2>&1
echo "tests rc $? at $SECONDS s: $(grep -c '\[       OK \]' $r/tests_bwd_$commit.log) OK, $(grep -c '\[  FAILED  \]' $r/tests_bwd_$commit.log) FAILED lines"; tail -2 $r/tests_bwd_$commit.log
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 build-a/flashtrain_tests \
  --gtest_filter='*Sm90ShapesMultiStep*:*DeterministicSelfAttentionBitwise*' > $r/racecheck_$commit.log 2>&1
echo "racecheck rc $? at $SECONDS s: $(grep 'RACECHECK SUMMARY' $r/racecheck_$commit.log)"
pack
lib=$PWD/build-a/python/flashtrain/libflashtrain_torch.so
if (( $(left) > 100 )); then
  FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT=$commit PYTHONPATH=$PWD/python timeout $(( $(left) - 5 )) \
    python3 -u bench/bench_attention.py --json $r/bench.json --markdown $r/bench.md --deterministic --precision-high > $r/bench.log 2>&1
  echo "grid rc $? at $SECONDS s"; pack
fi
if (( $(left) > 80 )); then
  FLASHTRAIN_COMMIT=$commit FLASHTRAIN_TORCH_LIBRARY=$lib PYTHONPATH=$PWD/python timeout $(( $(left) - 3 )) \
    python3 bench/e2e/run_e2e.py --mode paired --out-dir $r/e2e --budget-seconds $(( $(left) - 12 )) \
    --paired-rounds 16 --seqs 4k,8k,16k,32k > $r/e2e.log 2>&1
  echo "e2e rc $? at $SECONDS s"; grep -a "^| 4k\|^| 8k\|^| 16k\|^| 32k" $r/e2e/RESULTS.md 2>/dev/null; pack
fi
grep "^| bf16 | 128 \|^| fp16 | 128 " $r/bench.md 2>/dev/null | awk -F'|' '{print $2,$3,$4,$5,$6,$10,$12}'
echo "elapsed $SECONDS"
