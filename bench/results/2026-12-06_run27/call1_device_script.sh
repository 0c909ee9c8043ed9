#!/bin/bash
# Run 27 call 1: the D 256 split-D backward issuing step t + 1's S^T GEMM before step t's dQ
# additions (split_s_ahead.patch, against the tree it runs on). Builds A (this tree, D 256) and B
# (the patch applied; torch ops namespace flashtrain_b; D 256); on B the CUDA backward and
# numerics tests and racecheck of Sm90ShapesMultiStep and Sm90FewStepsPerBlock (bf16); the A/B in
# one process, default and deterministic, bf16 and fp16, S 2k-16k; each step skipped when the
# deadline would pass.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<literal HEAD> DEADLINE=540 bash bench/results/2026-12-06_run27/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v27; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-540} - SECONDS)); }
note "commit ${COMMIT:-?}, $(nvidia-smi --query-gpu=name --format=csv,noheader)"
rc=$(bash bench/device_build.sh build-a "256" $o/build_a.log)
note "build A: exit $rc ($((SECONDS - t0)) s)"
git apply bench/results/2026-12-06_run27/split_s_ahead.patch || { note "split_s_ahead.patch does not apply"; exit 1; }
rc=$(EXTRA_CMAKE=-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b bash bench/device_build.sh build-b "256" $o/build_b.log)
note "build B: exit $rc ($((SECONDS - t0)) s)"
grep -h "spill" $o/build_b.log | grep split | sort -u | head -10 >> $o/summary.txt
timeout 200 build-b/flashtrain_tests --gtest_filter='*CudaBackward*:*CudaNumerics*' > $o/tests.log 2>&1
note "tests (B): exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
if (( $(left) > 200 )); then
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 build-b/flashtrain_tests \
    --gtest_filter='*Sm90ShapesMultiStep/bf16:*Sm90FewStepsPerBlock/bf16' > $o/racecheck.log 2>&1
  note "racecheck (B): exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log)) ($((SECONDS - t0)) s)"
  tail -c 2000 $o/racecheck.log > $o/racecheck_tail.txt
fi
if (( $(left) > 60 )); then
  PYTHONPATH=$PWD/python timeout $(( $(left) - 10 )) python3 -u bench/ab_builds.py \
    --a build-a/python/flashtrain/libflashtrain_torch.so --b build-b/python/flashtrain/libflashtrain_torch.so \
    --labels main,s_ahead --dims 256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16 \
    --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
tar czf "$1/run27_call1.tgz" --exclude=v27/build_a.log --exclude=v27/build_b.log --exclude=v27/racecheck.log -C /tmp v27
cp $o/summary.txt $o/ab.md "$1/" 2>/dev/null
cat $o/summary.txt; cat $o/ab.md 2>/dev/null
