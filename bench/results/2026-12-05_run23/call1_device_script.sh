#!/bin/bash
# Run 23 call 1: the D 256 backward as cluster pairs sharing each Q / dO load (TMA multicast) on
# the H200: build (sm_90a, D 64;128;256, tests and the torch extension), the CUDA tests of the sm90
# backward, the pairs against single blocks in one process (FLASHTRAIN_BWD_CLUSTER=off / auto, one
# library), ncu of the D 256 pair kernel and of the D 128 kernel (L2 lines), racecheck and memcheck
# of the pair test, each step skipped once the deadline would pass; first bench/l2_reduce_probe.cu
# (how fast the L2 takes fp32 additions by per-thread and bulk reductions).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-05_run23/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-560} - SECONDS)); }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B build-v -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=${HDIMS:-64;128;256}" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" > $o/configure.log 2>&1
cmake --build build-v -j 16 --target flashtrain_tests flashtrain_torch > $o/build.log 2>&1
note "build: exit $? ($((SECONDS - t0)) s)"
grep -h "spill" $o/build.log | grep sm90 | sort -u | head -10 >> $o/summary.txt
lib=$PWD/build-v/python/flashtrain/libflashtrain_torch.so
nvcc -O3 -std=c++17 -arch=sm_90a bench/l2_reduce_probe.cu -o build-v/l2_reduce_probe > $o/probe.log 2>&1 &&
  { build-v/l2_reduce_probe; build-v/l2_reduce_probe --heads 1 --rows 16384; } >> $o/probe.log 2>&1
note "l2 probe: exit $? ($((SECONDS - t0)) s)"; cat $o/probe.log >> $o/summary.txt
tests=${TESTS:-'*SafePassWalksManyTilesPerBlock*:*SafePassOnEveryBackwardPath*:*Sm90ClusterPair*:*Sm90SplitD*:*Sm90ShapesMultiStep*:*Sm90FewStepsPerBlock*:*Sm90DkDvEpilogue*:*DeterministicSelfAttentionBitwise*:*DeterministicWindowVarlenBitwise*:*EveryHeadDimPairMultiTile*:*SplitQueryHeadGroup*'}
timeout 170 build-v/flashtrain_tests --gtest_filter="$tests" > $o/tests.log 2>&1
note "tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-600)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs|dq:" $o/tests.log | head -20 >> $o/summary.txt
if (( $(left) > 100 )); then
  PYTHONPATH=$PWD/python timeout 150 python3 -u bench/ab_builds.py --a $lib --b $lib --labels single,pair \
    --env-a FLASHTRAIN_BWD_CLUSTER=off --env-b FLASHTRAIN_BWD_CLUSTER=${AB_MODE:-dq} --dims ${AB_DIMS:-256} \
    --seqlens 2048,8192,16384 --dtypes bf16,fp16 --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 200 )); then
  FLASHTRAIN_BWD_CLUSTER=${AB_MODE:-dq} FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT="${COMMIT:-unknown}" PYTHONPATH=$PWD/python \
    timeout $(( $(left) - 170 )) python3 -u bench/bench_attention.py --dims 256 --seqlens 2048,4096,8192,16384 \
    --deterministic --json $o/bench_d256.json --markdown $o/bench_d256.md > $o/bench_d256.log 2>&1
  note "D 256 grid with pairs: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 80 )); then
  FLASHTRAIN_BWD_CLUSTER=${AB_MODE:-dq} NCU_SOURCE=0 FLASHTRAIN_TORCH_LIBRARY=$lib timeout $(( $(left) - 60 )) bench/ncu_kernels.sh /tmp/ncu \
    bwd_split_kernel_sm90:8192:256:bf16:no > $o/ncu.log 2>&1
  note "ncu: exit $? ($((SECONDS - t0)) s)"
  cp /tmp/ncu/ncu_summary.md $o/ 2>/dev/null
  for f in /tmp/ncu/*.raw.txt; do
    grep -E "lts__t_(sectors|requests)(_srcunit_tex)?_op_(red|atom|read|write)\.sum |lts__throughput|lts__t_sectors\.sum |lts__d_atomic|dram__bytes_(read|write)\.sum |gpu__time_duration\.sum |sm__pipe_tensor_op_gmma_cycles_active.avg.pct|launch__cluster" "$f" | grep -v "\.min\|\.max" | head -40 > "$o/$(basename "$f" .raw.txt)_lts.txt"
  done
fi
if (( $(left) > 50 )); then
  timeout $(( $(left) - 30 )) compute-sanitizer --tool racecheck --error-exitcode 1 build-v/flashtrain_tests \
    --gtest_filter='*Sm90ClusterPairMatchesSingleBlocks/bf16' > $o/racecheck.log 2>&1
  note "racecheck: exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log)) ($((SECONDS - t0)) s)"
fi
if (( $(left) > 40 )); then
  timeout $(( $(left) - 20 )) compute-sanitizer --tool memcheck --error-exitcode 1 build-v/flashtrain_tests \
    --gtest_filter='*Sm90ClusterPairMatchesSingleBlocks/bf16' > $o/memcheck.log 2>&1
  note "memcheck: exit $? ($(grep -E 'ERROR SUMMARY' $o/memcheck.log)) ($((SECONDS - t0)) s)"
fi
tail -c 20000 $o/tests.log > $o/tests_tail.txt; tail -c 3000 $o/racecheck.log > $o/racecheck_tail.txt 2>/dev/null
tail -c 3000 $o/memcheck.log > $o/memcheck_tail.txt 2>/dev/null
tar czf "$1/run23_call1.tgz" --exclude=v/build.log -C /tmp v
cp $o/summary.txt $o/ab.md $o/bench_d256.md $1/ 2>/dev/null
cat $o/summary.txt; cat $o/ab.md $o/bench_d256.md 2>/dev/null; cat $o/*_lts.txt 2>/dev/null | head -60
