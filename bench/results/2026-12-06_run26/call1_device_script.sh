#!/bin/bash
# Run 26 call 1: the D 64 / 128 deterministic backward's dQ warp passing a turn on while the next
# step's reductions are already issued (det_dq_overlap.patch, against the tree it runs on). Builds
# A (this tree, D 64;128;256) and B (the patch applied; torch ops namespace flashtrain_b; D 64;128);
# on A the deterministic and cluster-pair CUDA tests (4a5002c's review changed the turn spin and the
# pair launcher after their last GPU run); on B the deterministic CUDA tests and racecheck of
# DeterministicSelfAttentionBitwise/bf16; the A/B in one process, deterministic and default (a null
# check), bf16 and fp16, S 2k-16k; each step skipped when the deadline would pass.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<literal HEAD> DEADLINE=540 bash bench/results/2026-12-06_run26/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-540} - SECONDS)); }
rc=$(bash bench/device_build.sh build-a "64;128;256" $o/build_a.log)
note "build A: exit $rc ($((SECONDS - t0)) s)"
timeout 150 build-a/flashtrain_tests --gtest_filter='*Deterministic*:*ClusterPair*' > $o/tests_a.log 2>&1
note "tests (A): exit $? ($(grep -c '^\[       OK \]' $o/tests_a.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests_a.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests_a.log | head -20 >> $o/summary.txt
git apply bench/results/2026-12-06_run26/det_dq_overlap.patch || { note "det_dq_overlap.patch does not apply"; exit 1; }
rc=$(EXTRA_CMAKE=-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b bash bench/device_build.sh build-b "64;128" $o/build_b.log)
note "build B: exit $rc ($((SECONDS - t0)) s)"
grep -h "spill" $o/build_b.log | grep sm90 | sort -u | head -10 >> $o/summary.txt
timeout 150 build-b/flashtrain_tests --gtest_filter='*Deterministic*' > $o/tests.log 2>&1
note "tests (B): exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
if (( $(left) > 150 )); then
  timeout 70 compute-sanitizer --tool racecheck --error-exitcode 1 build-b/flashtrain_tests \
    --gtest_filter='*DeterministicSelfAttentionBitwise/bf16' > $o/racecheck.log 2>&1
  note "racecheck (B): exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log)) ($((SECONDS - t0)) s)"
  tail -c 2000 $o/racecheck.log > $o/racecheck_tail.txt
fi
if (( $(left) > 60 )); then
  PYTHONPATH=$PWD/python timeout $(( $(left) - 10 )) python3 -u bench/ab_builds.py \
    --a build-a/python/flashtrain/libflashtrain_torch.so --b build-b/python/flashtrain/libflashtrain_torch.so \
    --labels main,overlap --dims 64,128 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16 \
    --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
tar czf "$1/run26_call1.tgz" --exclude=v/build_a.log --exclude=v/build_b.log --exclude=v/racecheck.log -C /tmp v
cp $o/summary.txt $o/ab.md "$1/" 2>/dev/null
cat $o/summary.txt; cat $o/ab.md 2>/dev/null
