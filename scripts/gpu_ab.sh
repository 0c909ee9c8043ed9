#!/usr/bin/env bash
# A/B of a second source tree against this one on a GPU machine, in one device call: builds both
# (sm_90a, FLASHTRAIN_HDIMS of the change under test) side by side, runs tree B's CUDA tests and
# compute-sanitizer racecheck on the filters given, then times both in one process
# (bench/ab_builds.py). Logs and tables go to OUTDIR; the summary is printed last.
#
# Usage: scripts/gpu_ab.sh OUTDIR TREE_B|--patch 'FILE ...'|--prebuilt DIR [--label-b NAME] [--hdims '64;128'] [--tests FILTER]
#                          [--race FILTER] [--bench 'ab_builds.py options'] [--tests-on a|b]
#                          [--grid COMMIT] [--ncu 'CASE ...'] [--deadline SECONDS]
#   TREE_B    a checkout of the other version inside this repo, so that it travels, e.g.
#             `git worktree add .ab/wgs wip/some-branch` here and carry [".ab"] in the device call
#             (/.ab/ is git-ignored)
#   --patch   instead of TREE_B: B is this tree with these patches applied (git apply, undone once
#             B is built). A is built first and its extension kept aside, then the same build folder
#             is rebuilt as B, which recompiles only what the patches touch (one build after the
#             other, each with all jobs); the tests and racecheck run on B
#   --prebuilt instead of both: what scripts/prebuild.sh built on the CPU machine (DIR/a, and DIR/b
#             for a patch; carry [".prebuild/out"]), unpacked, nothing compiled here (--hdims is
#             then the prebuild's). The tests and racecheck run on B's test binary (prebuild.sh
#             --tests). Without DIR/b, B is A: no A/B timing, the tests, --grid and --ncu on A
#   --tests   gtest filter run on tree B's build (default: CudaBackward, Deterministic, Accuracy and
#             MaskedRows on cuda)
#             ('' with --race '': neither build compiles the tests)
#   --race    gtest filter run under racecheck (default '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16';
#             '' skips it)
#   --bench   options for bench/ab_builds.py (default '--seqlens 1024,8192 --dims 64,128 --dtypes bf16,fp16 --deterministic');
#             may be given again for further comparisons of the same two builds (e.g. other --env-a /
#             --env-b settings), written to ab_2.md / ab_2.json and so on
#   --tests-on which build gets the C++ tests and racecheck (default b, the change under test; a when
#             this tree is the change and TREE_B the baseline, so that build A, whose operators are
#             torch.ops.flashtrain, can also serve flashtrain's Python package afterwards)
#   --grid    then build A's full benchmark grid (bench_attention.py --deterministic --precision-high,
#             about 90 s), labelled COMMIT, into OUTDIR/bench.md and bench.json
#   --ncu     then bench/ncu_kernels.sh on build A for these cases (about 20 s each), into OUTDIR/ncu/a,
#             and on build B into OUTDIR/ncu/b when the deadline leaves time
#   --deadline skip --grid / --ncu when they would end later than SECONDS after the start (the
#             device call's limit, less the time to send the results back)
# OUTDIR ends with at most 8 files (what a device call returns; a second --bench adds two, a third
# and more pack the JSON tables into ab_json.tgz): the logs in logs.tgz, the ncu folder without its reports in ncu.tgz.
# Environment: BUILD_JOBS (default: all cores), STEP_LIMIT (seconds the tests and racecheck may
# each run, default 240: tests still running then are reported as a hang and nothing after them
# runs), GTest as in gpu_check.sh (.gtest/ when carried).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 2 ]] && { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
tree_b=""
patches=""
prebuilt=""
if [[ $1 == --patch ]]; then
  patches=$2
  shift 2
  label_b=patched
elif [[ $1 == --prebuilt ]]; then
  prebuilt=$(cd "$2" && pwd) || { echo "gpu_ab: no folder $2" >&2; exit 2; }
  [[ -f $prebuilt/a/libflashtrain_torch.so.xz ]] || { echo "gpu_ab: $2/a has no libflashtrain_torch.so.xz" >&2; exit 2; }
  shift 2
  label_b=patched
else
  tree_b=$(cd "$1" && pwd) || { echo "gpu_ab: no tree $1" >&2; exit 2; }
  shift
  label_b=$(basename "$tree_b")
fi
hdims="64;128"
tests='*CudaBackward*:*Deterministic*cuda*:*Accuracy*cuda*:*MaskedRows*cuda*'
race='*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16'
benches=()
tests_on=b
grid=""
ncu_cases=""
deadline=100000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --label-b) label_b=$2; shift ;;
    --hdims) hdims=$2; shift ;;
    --tests) tests=$2; shift ;;
    --race) race=$2; shift ;;
    --bench) benches+=("$2"); shift ;;
    --tests-on) tests_on=$2; shift ;;
    --grid) grid=$2; shift ;;
    --ncu) ncu_cases=$2; shift ;;
    --deadline) deadline=$2; shift ;;
    *) echo "gpu_ab: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
(( ${#benches[@]} )) || benches=('--seqlens 1024,8192 --dims 64,128 --dtypes bf16,fp16 --deterministic')
jobs=${BUILD_JOBS:-$(nproc)}
step_limit=${STEP_LIMIT:-240}
python=${PYTHON:-python3}
torch_dir=""
if [[ -z $prebuilt ]]; then torch_dir=$($python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch || exit 2; fi
gtest_flags=()
[[ -d .gtest/lib/x86_64-linux-gnu/cmake/GTest ]] && gtest_flags=("-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest")
summary=()
note() { summary+=("$1"); echo "gpu_ab: $1"; }
# The device returns at most 8 files from OUTDIR: the logs go into logs.tgz and the ncu folder (less
# its .ncu-rep reports) into ncu.tgz, leaving summary.txt, ab.md / ab.json, bench.md / bench.json,
# ncu.log and the two archives. Past 8 files (a third --bench on), the tables' JSON twins go into
# ab_json.tgz.
pack() {
  local logs=()
  for f in "$out"/build_*.log "$out"/tests_*.log "$out"/racecheck_*.log "$out"/ab*.log "$out"/bench.log; do
    [[ -f $f ]] && logs+=("$(basename "$f")")
  done
  (( ${#logs[@]} )) && tar czf "$out/logs.tgz" -C "$out" "${logs[@]}" && (cd "$out" && rm -f "${logs[@]}")
  [[ -d $out/ncu ]] && tar czf "$out/ncu.tgz" -C "$out" --exclude='*.ncu-rep' ncu && rm -rf "$out/ncu"
  local files=("$out"/*) json=()
  if (( ${#files[@]} > 8 )); then
    for f in "$out"/ab*.json; do [[ -f $f ]] && json+=("$(basename "$f")"); done
    (( ${#json[@]} )) && tar czf "$out/ab_json.tgz" -C "$out" "${json[@]}" && (cd "$out" && rm -f "${json[@]}")
  fi
}
finish() { printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"; pack; exit "${1:-0}"; }

# Both builds take this tree's CUTLASS headers (tree B carries none of its own).
configure() {  # SRC BUILD NAMESPACE TESTS
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=$hdims" "-DFLASHTRAIN_TESTS=$4" -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
    "-DFLASHTRAIN_TORCH_OP_NAMESPACE=$3" "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    "${gtest_flags[@]}"
}
[[ $tests_on == a || $tests_on == b ]] || { echo "gpu_ab: --tests-on takes a or b" >&2; exit 2; }
[[ -n $patches$prebuilt && $tests_on == a ]] && { echo "gpu_ab: with --patch or --prebuilt the tests run on B" >&2; exit 2; }
tests_a=OFF; tests_b=ON; target_a=(--target flashtrain_torch); target_b=()
[[ $tests_on == a ]] && { tests_a=ON; tests_b=OFF; target_a=(); target_b=(--target flashtrain_torch); }
# The build with the tests (the library, CLI and tests besides the extension) gets 5/8 of the jobs.
jobs_a=$((jobs * 3 / 8)); [[ $tests_on == a ]] && jobs_a=$((jobs * 5 / 8))
# Neither tests nor racecheck: both builds only the extension, with half the jobs each.
if [[ -z $tests && -z $race ]]; then
  tests_a=OFF; tests_b=OFF; target_a=(--target flashtrain_torch); target_b=(--target flashtrain_torch)
  jobs_a=$((jobs / 2))
fi
t0=$SECONDS
lib_a=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so
same_ab=0
if [[ -n $prebuilt ]]; then
  unxz() { $python scripts/unxz.py "$@"; }
  unpack() {  # SIDE BUILD: the layout of a build folder, for the steps below
    mkdir -p "$2/python/flashtrain" &&
      unxz "$prebuilt/$1/libflashtrain_torch.so.xz" "$2/python/flashtrain/libflashtrain_torch.so" || return 1
    [[ ! -f $prebuilt/$1/flashtrain_tests.xz ]] ||
      { unxz "$prebuilt/$1/flashtrain_tests.xz" "$2/flashtrain_tests" && chmod +x "$2/flashtrain_tests"; }
  }
  rm -rf build-ab-pre-a build-ab-pre-b
  unpack a build-ab-pre-a; rc_a=$?
  lib_a=$PWD/build-ab-pre-a/python/flashtrain/libflashtrain_torch.so
  note "prebuilt A (unpacked: exit $rc_a): $(tr '\n' ' ' < "$prebuilt/a/build.txt")"
  if [[ -d $prebuilt/b ]]; then
    dir_b=build-ab-pre-b
    unpack b "$dir_b"; rc_b=$?
    note "prebuilt B (unpacked: exit $rc_b): $(tr '\n' ' ' < "$prebuilt/b/build.txt")"
  else
    dir_b=build-ab-pre-a; rc_b=$rc_a; same_ab=1; label_b=a
  fi
  cat "$prebuilt"/*/ptxas_notes.txt 2>/dev/null | sort -u | sed 's/^/  /' | head -20
  [[ -x $dir_b/flashtrain_tests ]] || { [[ -z $tests && -z $race ]] || note "no test binary in $prebuilt (prebuild.sh --tests): no tests"; tests=""; race=""; }
elif [[ -n $patches ]]; then
  dir_b=build-ab-a
  { configure . build-ab-a flashtrain "$tests_b" && cmake --build build-ab-a -j "$jobs" "${target_b[@]}"; } > "$out/build_a.log" 2>&1
  rc_a=$?
  rc_b=1
  if [[ $rc_a == 0 ]]; then
    kept=$(mktemp -d) && cp "$lib_a" "$kept/" && lib_a=$kept/libflashtrain_torch.so
    # shellcheck disable=SC2086
    if git apply $patches; then
      { configure . build-ab-a flashtrain_b "$tests_b" && cmake --build build-ab-a -j "$jobs" "${target_b[@]}"; } > "$out/build_b.log" 2>&1
      rc_b=$?
      # shellcheck disable=SC2086
      git apply -R $patches
    else
      note "patches do not apply: $patches"
    fi
  fi
else
  dir_b=build-ab-$label_b
  { configure . build-ab-a flashtrain $tests_a && cmake --build build-ab-a -j "$jobs_a" "${target_a[@]}"; } \
    > "$out/build_a.log" 2>&1 &
  pid_a=$!
  { configure "$tree_b" "$dir_b" flashtrain_b $tests_b && cmake --build "$dir_b" -j $((jobs - jobs_a)) "${target_b[@]}"; } \
    > "$out/build_b.log" 2>&1
  rc_b=$?
  wait $pid_a
  rc_a=$?
fi
[[ -z $prebuilt ]] && note "build A (this tree): exit $rc_a; build B ($label_b): exit $rc_b; $((SECONDS - t0)) s"
# Spills, and ptxas's C751x notes (wgmmas serialised or a wait injected; scripts/ptxas_check.sh).
grep -hE "spill|C751[0-9]" "$out/build_a.log" "$out/build_b.log" 2>/dev/null | sed 's/^/  /' | sort -u | head -20
tested=$dir_b; rc_t=$rc_b
[[ $tests_on == a ]] && { tested=build-ab-a; rc_t=$rc_a; }
T=${tests_on^^}
if [[ $rc_t == 0 && -n "$tests" ]]; then
  timeout "$step_limit" "$tested"/flashtrain_tests --gtest_filter="$tests" > "$out/tests_$tests_on.log" 2>&1
  rc=$?
  note "tests on $T ($tests): exit $rc ($(grep -E '^\[  (PASSED|FAILED)  \]' "$out/tests_$tests_on.log" | tr '\n' ' '))"
  [[ $rc == 124 ]] && { note "tests on $T: still running after $step_limit s (a hang?): nothing more runs"; finish 1; }
fi
if [[ $rc_t == 0 && -n "$race" ]] && command -v compute-sanitizer >/dev/null; then
  timeout "$step_limit" compute-sanitizer --tool racecheck --error-exitcode 1 "$tested"/flashtrain_tests --gtest_filter="$race" \
    > "$out/racecheck_$tests_on.log" 2>&1
  note "racecheck on $T ($race): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/racecheck_$tests_on.log"))"
fi
if [[ $rc_a == 0 && $rc_b == 0 && $same_ab == 0 ]]; then
  for i in "${!benches[@]}"; do
    name=ab; (( i )) && name=ab_$((i + 1))
    # shellcheck disable=SC2086
    PYTHONPATH="$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" $python bench/ab_builds.py \
      --a "$lib_a" --b "$dir_b"/python/flashtrain/libflashtrain_torch.so \
      --labels "this,$label_b" ${benches[$i]} --markdown "$out/$name.md" --json "$out/$name.json" > "$out/$name.log" 2>&1
    note "ab_builds ($name: ${benches[$i]}): exit $? ($((SECONDS - t0)) s in all)"
    cat "$out/$name.md" 2>/dev/null
  done
fi
if [[ -n "$grid" && $rc_a == 0 ]]; then
  if (( SECONDS + 100 > deadline )); then
    note "grid: skipped, $((deadline - SECONDS)) s left before the deadline"
  else
    FLASHTRAIN_TORCH_LIBRARY=$lib_a FLASHTRAIN_COMMIT=$grid PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
      timeout $((deadline - SECONDS)) $python -u bench/bench_attention.py --json "$out/bench.json" \
      --markdown "$out/bench.md" --deterministic --precision-high > "$out/bench.log" 2>&1
    note "grid on A ($grid): exit $? ($((SECONDS - t0)) s in all)"
  fi
fi
if [[ -n "$ncu_cases" && $rc_a == 0 ]]; then
  # shellcheck disable=SC2206
  cases=($ncu_cases)
  if (( SECONDS + 20 * ${#cases[@]} + 5 > deadline )); then
    note "ncu: skipped, $((deadline - SECONDS)) s left before the deadline"
  else
    profile() {  # SIDE LIBRARY NAMESPACE (B's operators: torch.ops.flashtrain_b, python/flashtrain/_load.py)
      FLASHTRAIN_TORCH_LIBRARY=$2 FLASHTRAIN_TORCH_OP_NAMESPACE=$3 timeout $((deadline - SECONDS)) \
        bench/ncu_kernels.sh "$out/ncu/$1" "${cases[@]}" >> "$out/ncu.log" 2>&1
      note "ncu on ${1^^} (${cases[*]}): exit $? ($((SECONDS - t0)) s in all)"
      cat "$out/ncu/$1/ncu_summary.md" 2>/dev/null
    }
    profile a "$lib_a" flashtrain
    if [[ $rc_b == 0 && $same_ab == 0 ]] && (( SECONDS + 20 * ${#cases[@]} + 5 <= deadline )); then
      profile b "$PWD/$dir_b/python/flashtrain/libflashtrain_torch.so" flashtrain_b
    fi
  fi
fi
finish
