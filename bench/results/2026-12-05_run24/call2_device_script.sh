#!/bin/bash
# Run 24 call 2: deterministic D 256 as cluster pairs summing dQ (one turn a pair, half passed by
# each block), kept as det_pairs.patch (against b311a3d's kernels) until measured: applied to this
# tree first. One build (sm_90a, D 256, tests and the torch extension); the CUDA tests of the
# pairs, the deterministic tests and the schedule model; racecheck of the deterministic pair test;
# the A/B of single blocks (FLASHTRAIN_BWD_CLUSTER=off) against the pairs (dq) in one process,
# deterministic and default; then the D 256 grid against cuDNN and FA2, each step skipped when the
# deadline would pass.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<HEAD> DEADLINE=520 bash bench/results/2026-12-05_run24/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
git apply bench/results/2026-12-05_run24/det_pairs.patch || { echo "det_pairs.patch does not apply"; exit 1; }
o=/tmp/v; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-520} - SECONDS)); }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-v -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=256" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" > $o/configure.log 2>&1
cmake --build build-v -j 16 --target flashtrain_tests flashtrain_torch > $o/build.log 2>&1
note "build: exit $? ($((SECONDS - t0)) s)"
grep -h "spill" $o/build.log | grep sm90 | sort -u | head -10 >> $o/summary.txt
lib=$PWD/build-v/python/flashtrain/libflashtrain_torch.so
timeout 150 build-v/flashtrain_tests --gtest_filter='*Sm90DeterministicClusterPairs*:*Sm90ClusterPair*:*Deterministic*cuda*:*DeterministicCausalBeyondOneWave*:*DeterministicSelfAttentionBitwise*:*BackwardTileOrder*:*Sm90SplitD*:*Sm90ShapesMultiStep*' > $o/tests.log 2>&1
note "tests: exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok, $(grep -c '^\[  FAILED  \] [A-Z]' $o/tests.log) failed; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
if (( $(left) > 200 )); then
  timeout 70 compute-sanitizer --tool racecheck --error-exitcode 1 build-v/flashtrain_tests \
    --gtest_filter='*Sm90DeterministicClusterPairs/bf16' > $o/racecheck.log 2>&1
  note "racecheck: exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log)) ($((SECONDS - t0)) s)"
fi
if (( $(left) > 120 )); then
  PYTHONPATH=$PWD/python timeout 150 python3 -u bench/ab_builds.py --a $lib --b $lib --labels single,pair \
    --env-a FLASHTRAIN_BWD_CLUSTER=off --env-b FLASHTRAIN_BWD_CLUSTER=dq --dims 256 --deterministic \
    --seqlens 2048,8192,16384 --dtypes bf16 --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 60 )); then
  FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT="${COMMIT:-unknown}" PYTHONPATH=$PWD/python \
    timeout $(( $(left) - 15 )) python3 -u bench/bench_attention.py --dims 256 --seqlens 2048,4096,8192,16384 \
    --deterministic --json $o/d256.json --markdown $o/d256.md > $o/d256.log 2>&1
  note "D 256 grid: exit $? ($((SECONDS - t0)) s)"
fi
tail -c 3000 $o/racecheck.log > $o/racecheck_tail.txt 2>/dev/null
tar czf "$1/run24_call2.tgz" --exclude=v/build.log -C /tmp v
cp $o/summary.txt $o/ab.md $o/d256.md $o/d256.json "$1/" 2>/dev/null
cat $o/summary.txt; cat $o/ab.md $o/d256.md 2>/dev/null
