#!/bin/bash
# Runs 26 and 27 in one call (device time left for one): builds A (this tree, D 64;128;256) and runs
# the deterministic and cluster-pair CUDA tests on it (4a5002c's review of the turn spin and the pair
# launcher); keeps A's torch extension, applies det_dq_overlap.patch (run 26) and split_s_ahead.patch
# (run 27), rebuilds the same build folder incrementally as B (torch ops namespace flashtrain_b;
# only the backward instantiations and the binding recompile); on B the deterministic, sm90 and
# numerics CUDA tests; the A/B in one process (D 64 / 128 / 256, default and deterministic, bf16 and
# fp16, S 2k-16k); racecheck of Sm90ShapesMultiStep and DeterministicSelfAttentionBitwise (bf16) on B
# with the time left. Each step skipped when the deadline would pass.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<literal HEAD> DEADLINE=570 bash bench/results/2026-12-06_run27/call_merged_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/vm; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-570} - SECONDS)); }
finish() {
  tar czf "$1/run27_merged.tgz" --exclude=vm/build_a.log --exclude=vm/build_b.log --exclude=vm/racecheck.log -C /tmp vm
  cp $o/summary.txt $o/ab.md "$1/" 2>/dev/null
  cat $o/summary.txt; cat $o/ab.md 2>/dev/null
}
note "commit ${COMMIT:-?}, $(nvidia-smi --query-gpu=name --format=csv,noheader)"
rc=$(bash bench/device_build.sh build-a "64;128;256" $o/build_a.log)
note "build A: exit $rc ($((SECONDS - t0)) s)"
(( rc == 0 )) || { tail -30 $o/build_a.log >> $o/summary.txt; finish "$1"; exit 1; }
timeout 120 build-a/flashtrain_tests --gtest_filter='*Deterministic*:*ClusterPair*' > $o/tests_a.log 2>&1
note "tests (A): exit $? ($(grep -c '^\[       OK \]' $o/tests_a.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests_a.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests_a.log | head -20 >> $o/summary.txt
mkdir -p /tmp/alib && cp build-a/python/flashtrain/libflashtrain_torch.so /tmp/alib/
for patch in 2026-12-06_run26/det_dq_overlap.patch 2026-12-06_run27/split_s_ahead.patch; do
  git apply bench/results/$patch || { note "$patch does not apply"; finish "$1"; exit 1; }
done
rc=$(EXTRA_CMAKE=-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b bash bench/device_build.sh build-a "64;128;256" $o/build_b.log)
note "build B (incremental): exit $rc ($((SECONDS - t0)) s)"
grep -h "spill" $o/build_b.log | grep bwd_ | sort -u | head -12 >> $o/summary.txt
if (( $(left) > 150 )); then
  timeout $(( $(left) > 300 ? 160 : 100 )) build-a/flashtrain_tests --gtest_filter='*Deterministic*:*Sm90*:*CudaNumerics*' > $o/tests.log 2>&1
  note "tests (B): exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
fi
if (( $(left) > 50 )); then
  PYTHONPATH=$PWD/python timeout $(( $(left) > 130 ? 110 : $(left) - 10 )) python3 -u bench/ab_builds.py \
    --a /tmp/alib/libflashtrain_torch.so --b build-a/python/flashtrain/libflashtrain_torch.so \
    --labels main,patched --dims 64,128,256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16 \
    --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 40 )); then
  timeout $(( $(left) - 15 )) compute-sanitizer --tool racecheck --error-exitcode 1 build-a/flashtrain_tests \
    --gtest_filter='*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' > $o/racecheck.log 2>&1
  note "racecheck (B): exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log); $(grep -E '^\[  (PASSED|FAILED)  \]' $o/racecheck.log | tr '\n' ' ')) ($((SECONDS - t0)) s)"
  tail -c 2000 $o/racecheck.log > $o/racecheck_tail.txt
fi
finish "$1"
