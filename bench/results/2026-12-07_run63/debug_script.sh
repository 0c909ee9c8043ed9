#!/bin/bash
# Run 63 call 2: where B's forward (fwd_shifted_rows.patch) hits "an illegal instruction" (call 1:
# the first causal D 64 forward, then every CUDA call in that process failed). Each sm90 forward
# test of B's binary in its own process (so that one fault does not take the rest), then
# compute-sanitizer memcheck on the first that fails, for the kernel and PC.
# Usage (device, carry [".prebuild/out/run63"]): bash bench/results/2026-12-07_run63/debug_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1; mkdir -p "$out"
t=/tmp/ft_b_tests
python3 scripts/unxz.py \
  .prebuild/out/run63/b/flashtrain_tests.xz $t && chmod +x $t
first_bad=""
for name in $($t --gtest_list_tests --gtest_filter='Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*' |
              awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}'); do
  timeout 60 $t --gtest_filter="$name" > /tmp/one.log 2>&1
  rc=$?
  echo "$rc $name $(grep -m1 -o 'illegal[a-z ]*\|Failure' /tmp/one.log)" | tee -a "$out/per_test.txt"
  [[ $rc != 0 && -z $first_bad ]] && first_bad=$name
done
if [[ -n $first_bad ]]; then
  timeout 120 compute-sanitizer --tool memcheck --show-backtrace device $t --gtest_filter="$first_bad" \
    > "$out/memcheck.log" 2>&1
  echo "memcheck on $first_bad: exit $?" >> "$out/per_test.txt"
fi
