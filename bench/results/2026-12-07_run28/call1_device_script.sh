#!/bin/bash
# Run 28 call 1: the D 256 split-D backward with its loop rotated (step t's dQ additions and stage
# release at the top of step t + 1, after that step's S^T GEMM is issued) and scale * dQ carried in
# registers of its own (split_scaled_copy.patch; scripts/ptxas_check.sh: no C751x note, which run
# 27's two forms had). Builds A (this tree, D 256), keeps its torch extension, applies the patch and
# rebuilds incrementally as B (namespace flashtrain_b); on B the D 256 backward tests, the A/B
# (default and deterministic, bf16 and fp16, S 2k-16k), then racecheck of Sm90ShapesMultiStep (bf16);
# each step skipped when the deadline would pass; the build logs' C751x notes in the summary.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<literal HEAD> DEADLINE=330 bash bench/results/2026-12-07_run28/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
o=/tmp/v28; mkdir -p $o
t0=$SECONDS
note() { echo "$1" | tee -a $o/summary.txt; }
left() { echo $((${DEADLINE:-330} - SECONDS)); }
finish() {
  tar czf "$1/run28_call1.tgz" --exclude=v28/racecheck.log -C /tmp v28
  cp $o/summary.txt $o/ab.md "$1/" 2>/dev/null
  cat $o/summary.txt; cat $o/ab.md 2>/dev/null
}
note "commit ${COMMIT:-?}, $(nvidia-smi --query-gpu=name --format=csv,noheader)"
rc=$(bash bench/device_build.sh build-a "256" $o/build_a.log)
note "build A: exit $rc ($((SECONDS - t0)) s)"
(( rc == 0 )) || { tail -30 $o/build_a.log >> $o/summary.txt; finish "$1"; exit 1; }
mkdir -p /tmp/alib && cp build-a/python/flashtrain/libflashtrain_torch.so /tmp/alib/
git apply bench/results/2026-12-07_run28/split_scaled_copy.patch || { note "split_scaled_copy.patch does not apply"; finish "$1"; exit 1; }
rc=$(EXTRA_CMAKE=-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b bash bench/device_build.sh build-a "256" $o/build_b.log)
note "build B (incremental): exit $rc ($((SECONDS - t0)) s)"
grep -h "spill\|C751" $o/build_b.log | grep split | sort -u | cut -c1-300 | head -12 >> $o/summary.txt
if (( $(left) > 100 )); then
  timeout $(( $(left) > 200 ? 90 : 50 )) build-a/flashtrain_tests \
    --gtest_filter='*Sm90SplitD*:*Sm90ShapesMultiStep*:*Sm90FewSteps*:*ClusterPair*:*DeterministicSelfAttentionBitwise*:*DeterministicCausalBeyondOneWave*' > $o/tests.log 2>&1
  note "tests (B): exit $? ($(grep -c '^\[       OK \]' $o/tests.log) ok; $(grep -E '^\[  (PASSED|FAILED)  \]' $o/tests.log | tr '\n' ' ' | cut -c1-300)) ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|Failure|differs" $o/tests.log | head -20 >> $o/summary.txt
fi
if (( $(left) > 40 )); then
  PYTHONPATH=$PWD/python timeout $(( $(left) > 100 ? 70 : $(left) - 10 )) python3 -u bench/ab_builds.py \
    --a /tmp/alib/libflashtrain_torch.so --b build-a/python/flashtrain/libflashtrain_torch.so \
    --labels main,scaled_copy --dims 256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16 \
    --markdown $o/ab.md --json $o/ab.json > $o/ab.log 2>&1
  note "A/B: exit $? ($((SECONDS - t0)) s)"
fi
if (( $(left) > 30 )); then
  timeout $(( $(left) - 10 )) compute-sanitizer --tool racecheck --error-exitcode 1 build-a/flashtrain_tests \
    --gtest_filter='*Sm90ShapesMultiStep/bf16' > $o/racecheck.log 2>&1
  note "racecheck (B): exit $? ($(grep -E 'RACECHECK SUMMARY' $o/racecheck.log); $(grep -E '^\[  (PASSED|FAILED)  \]' $o/racecheck.log | tr '\n' ' ')) ($((SECONDS - t0)) s)"
  tail -c 2000 $o/racecheck.log > $o/racecheck_tail.txt
fi
finish "$1"
