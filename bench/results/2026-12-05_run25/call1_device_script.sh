#!/bin/bash
# Run 25 call 1: D 64 / 128 default backward with dQ added from the consumers' registers by vector
# atomics (FLASHTRAIN_BWD_DQ=atomic) against the staging for the dQ warp's TMA reductions (stage),
# and the corrected deterministic D 256 pair test. One build (sm_90a, D 64;128;256, tests and the
# torch extension); the new test, the deterministic pair test and the CUDA backward tests with
# atomic dQ; the A/B stage against atomic in one process (bf16 and fp16); ncu of the D 128 bf16 8k
# backward both ways; the full grid with atomic dQ, each step skipped when the deadline would pass.
# The atomic kernels are off main since: to rerun, `git apply bench/results/2026-12-05_run25/dq_atomic.patch` first.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<HEAD> DEADLINE=540 bash bench/results/2026-12-05_run25/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-540} - SECONDS)); }
rc=$(bash bench/device_build.sh build-v "64;128;256" $o/build.log)
note "build: exit $rc ($((SECONDS - t0)) s)"
grep -h "spill" $o/build.log | grep sm90 | sort -u | head -10 >> $o/summary.txt
lib=$PWD/build-v/python/flashtrain/libflashtrain_torch.so
timeout 120 build-v/flashtrain_tests --gtest_filter='*Sm90DqAtomicMatchesStaged*:*Sm90DeterministicClusterPairs*' > $o/tests.log 2>&1
note "tests: exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
if (( $(left) > 150 )); then
  PYTHONPATH=$PWD/python timeout 150 python3 -u bench/ab_builds.py --a $lib --b $lib --labels stage,atomic \
    --env-a FLASHTRAIN_BWD_DQ=stage --env-b FLASHTRAIN_BWD_DQ=atomic --dims 64,128 \
    --seqlens 2048,4096,8192,16384 --dtypes bf16,fp16 --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 60 )); then
  FLASHTRAIN_BWD_DQ=atomic timeout $(( $(left) - 30 > 100 ? 100 : $(left) - 30 )) build-v/flashtrain_tests --gtest_filter='*CudaBackward*:*Accuracy*cuda*' > $o/tests_atomic.log 2>&1
  note "tests with FLASHTRAIN_BWD_DQ=atomic: exit $? ($(grep -c '^\[       OK \]' $o/tests_atomic.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests_atomic.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|Failure" $o/tests_atomic.log | head -20 >> $o/summary.txt
fi
if (( $(left) > 150 )); then
  for m in stage atomic; do
    FLASHTRAIN_BWD_DQ=$m FLASHTRAIN_TORCH_LIBRARY=$lib NCU_SOURCE=0 timeout 70 bash bench/ncu_kernels.sh $o/ncu_$m \
      bwd_kernel_sm90:8192:128:bf16:no > $o/ncu_$m.log 2>&1
    note "ncu $m: exit $? ($((SECONDS - t0)) s)"
  done
fi
if (( $(left) > 120 )); then
  FLASHTRAIN_BWD_DQ=atomic FLASHTRAIN_TORCH_LIBRARY=$lib FLASHTRAIN_COMMIT="${COMMIT:-unknown} (FLASHTRAIN_BWD_DQ=atomic)" PYTHONPATH=$PWD/python \
    timeout $(( $(left) - 15 )) python3 -u bench/bench_attention.py --seqlens 2048,4096,8192,16384 \
    --deterministic --json $o/bench.json --markdown $o/bench.md > $o/bench.log 2>&1
  note "grid (atomic dQ): exit $? ($((SECONDS - t0)) s)"
fi
rm -f $o/ncu_*/*.ncu-rep
tar czf "$1/run25_call1.tgz" --exclude=v/build.log -C /tmp v
cp $o/summary.txt $o/ab.md $o/bench.md "$1/" 2>/dev/null
cat $o/summary.txt; cat $o/ab.md 2>/dev/null; cat $o/ncu_*/ncu_summary.md 2>/dev/null; head -40 $o/bench.md 2>/dev/null
