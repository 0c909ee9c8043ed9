#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), what a device call would otherwise spend its first
# 200-250 s building: the torch extension (and with --tests the CUDA C++ test binary) for sm_90a,
# against the GPU machine's torch (2.11.0+cu130, whose PyPI wheel is fetched once into .whl/ and
# only unpacked: nothing is installed). The results are xz-packed under OUTDIR (about 2 MB for all
# head dims), small enough to carry; scripts/gpu_ab.sh --prebuilt OUTDIR runs them there.
#
# Usage: scripts/prebuild.sh OUTDIR [--patch 'FILE ...'] [--hdims '64;128'] [--tests] [--jobs N] [--a-from DIR]
#   OUTDIR/a   this tree at HEAD plus its uncommitted changes to tracked files:
#              libflashtrain_torch.so.xz (torch operators torch.ops.flashtrain),
#              flashtrain_tests.xz with --tests, build.txt, ptxas_notes.txt (the spills and C751x
#              notes of the files this build compiled: a file an earlier build left current is
#              not in it; scripts/ptxas_check.sh reports any file), build.log.xz
#   OUTDIR/b   with --patch: the same tree with the patches applied (git apply), rebuilt in the same
#              folder (only what the patches touch recompiles); operators torch.ops.flashtrain_b,
#              so that A and B load in one process (bench/ab_builds.py)
#   --hdims    FLASHTRAIN_HDIMS (default '64;128;256')
#   --tests    also the test binary (needs .gtest: scripts/pack_gtest.sh); with --patch only B's
#   --jobs     parallel compile jobs (default: all cores; all head dims take about 16 min on 2)
#   --a-from   with --patch: take A from DIR/a (an earlier prebuild, without patches, of a commit
#              whose sources are HEAD's, and these head dims) and build only B, from the build
#              folder as the last prebuild left it
# The source worktree and build folder (.prebuild/, git-ignored) are kept, so a second run
# recompiles only what changed: a file whose content a rebuild puts back as it was keeps its old
# time stamp (so B after an earlier B with the same patch recompiles only the new ones). An
# OUTDIR under .prebuild/out/ travels with carry [".prebuild/out"]. Needs .cutlass
# (scripts/fetch_cutlass.sh), nvcc and PyPI the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]] && { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
patches="" hdims="64;128;256" tests=OFF jobs=$(nproc) a_from=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --patch) patches=$2; shift ;;
    --hdims) hdims=$2; shift ;;
    --tests) tests=ON ;;
    --jobs) jobs=$2; shift ;;
    --a-from) a_from=$2; shift ;;
    *) echo "prebuild: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -n $a_from ]]; then
  [[ -n $patches ]] || { echo "prebuild: --a-from needs --patch" >&2; exit 2; }
  a_info=$a_from/a/build.txt
  [[ -f $a_from/a/libflashtrain_torch.so.xz && -f $a_info ]] || { echo "prebuild: no prebuilt A in $a_from/a" >&2; exit 2; }
  a_commit=$(sed -n 's/^commit \([0-9a-f]\{40\}\)$/\1/p' "$a_info")
  # The sources that go into a build: committed as A's, and no uncommitted changes to them here.
  built=(src include python bindings CMakeLists.txt)
  [[ -n $a_commit ]] && git diff --quiet "$a_commit" HEAD -- "${built[@]}" && git diff --quiet HEAD -- "${built[@]}" &&
    grep -q "^patches none" "$a_info" && grep -q "^hdims $hdims;" "$a_info" ||
    { echo "prebuild: $a_info is not an A of HEAD's sources (unpatched, hdims $hdims)" >&2; exit 2; }
fi
[[ -d .cutlass/include ]] || { echo "prebuild: .cutlass/include missing (scripts/fetch_cutlass.sh)" >&2; exit 2; }
[[ $tests == OFF || -d .gtest/lib/x86_64-linux-gnu/cmake/GTest ]] ||
  { echo "prebuild: --tests needs .gtest (scripts/pack_gtest.sh)" >&2; exit 2; }
patch_files=()  # absolute paths: the patches are applied inside the worktree, where an untracked one is not
for f in $patches; do
  [[ -f $f ]] || { echo "prebuild: no patch $f" >&2; exit 2; }
  patch_files+=("$(realpath "$f")")
done

# The GPU machine's torch: the extension links its libraries by soname, which torch has loaded
# before the extension (python/flashtrain/_load.py), so the same version's headers and libraries suffice.
torch_version=2.11.0
torch_root=$PWD/.whl/torch-$torch_version
if [[ ! -f $torch_root/torch/share/cmake/Torch/TorchConfig.cmake ]]; then
  mkdir -p .whl
  python3 -m pip download -q --no-deps "torch==$torch_version" -d .whl
  wheel=$(ls .whl/torch-"$torch_version"-*.whl | head -1)
  rm -rf "$torch_root" && python3 -m zipfile -e "$wheel" "$torch_root"
  # zipfile drops the permission bits that the Caffe2 CMake files never need, and no binary runs here.
fi
grep -q "+cu130" "$torch_root/torch/version.py" ||
  echo "prebuild: warning: the wheel is not torch $torch_version+cu130 ($(grep __version__ "$torch_root/torch/version.py"))" >&2

src=$PWD/.prebuild/src build=$PWD/.prebuild/build
# A worktree of HEAD plus this tree's uncommitted changes to tracked files, so that edits here
# during the build do not reach it; CUTLASS comes from this tree. The worktree is kept and moved
# to the new HEAD with checkout, which rewrites only the files that differ: ninja then recompiles
# only what depends on them.
keep=$PWD/.prebuild/keep  # the worktree's modified files as the last prebuild left them
rm -rf "$keep" && mkdir -p "$keep"
if [[ -d $src/.git || -f $src/.git ]]; then
  (cd "$src" && git diff --name-only HEAD | while read -r f; do
    [[ -f $f ]] && mkdir -p "$keep/$(dirname "$f")" && cp -p "$f" "$keep/$f"; done)
  git -C "$src" reset -q --hard && git -C "$src" checkout -q --detach "$(git rev-parse HEAD)"
else
  git worktree prune && mkdir -p .prebuild && git worktree add -q --detach "$src" HEAD
fi
git diff --quiet HEAD || git diff HEAD --binary | git -C "$src" apply
built_from="$(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' plus uncommitted changes')"
restore_stamps() {  # files whose content is back to what the build folder last built keep its time stamps
  (cd "$keep" && find . -type f) | while read -r f; do
    cmp -s "$keep/$f" "$src/$f" && touch -r "$keep/$f" "$src/$f"; done
  return 0
}
configure() {  # NAMESPACE
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
    "-DFLASHTRAIN_HDIMS=$hdims" "-DFLASHTRAIN_TESTS=$2" -DFLASHTRAIN_TORCH=ON \
    "-DTorch_DIR=$torch_root/torch/share/cmake/Torch" "-DFLASHTRAIN_TORCH_OP_NAMESPACE=$1" \
    "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ \
    -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest"
}
pack() {  # SIDE NAMESPACE TESTS
  local dir=$out/$1
  rm -rf "$dir" && mkdir -p "$dir"
  local targets=(--target flashtrain_torch)
  [[ $3 == ON ]] && targets+=(--target flashtrain_tests)
  configure "$2" "$3" > "$dir/configure.log" 2>&1 ||
    { tail -30 "$dir/configure.log" >&2; echo "prebuild: configure $1 failed ($dir/configure.log)" >&2; exit 1; }
  local t0=$SECONDS
  echo "prebuild: building $1 (hdims $hdims, operators torch.ops.$2, tests $3) with $jobs jobs" >&2
  cmake --build "$build" -j "$jobs" "${targets[@]}" > "$dir/build.log" 2>&1 ||
    { tail -30 "$dir/build.log" >&2; echo "prebuild: build $1 failed ($dir/build.log)" >&2; exit 1; }
  xz -T0 -c "$build/python/flashtrain/libflashtrain_torch.so" > "$dir/libflashtrain_torch.so.xz"
  [[ $3 == ON ]] && xz -T0 -c "$build/flashtrain_tests" > "$dir/flashtrain_tests.xz"
  grep -hE "spill|C751[0-9]" "$dir/build.log" | sort -u > "$dir/ptxas_notes.txt" || true
  xz -T0 "$dir/build.log" "$dir/configure.log"
  {
    echo "commit $built_from"
    echo "patches ${4:-none}"
    echo "hdims $hdims; operators torch.ops.$2; tests $3; torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_root/torch/version.py")"
    echo "$(nvcc --version | tail -1); built $(date -u +%FT%TZ) in $((SECONDS - t0)) s"
  } > "$dir/build.txt"
  echo "prebuild: $1 in $((SECONDS - t0)) s: $(du -sh "$dir" | cut -f1) in $dir" >&2
}
apply_patches() {
  git -C "$src" apply "${patch_files[@]}" || { echo "prebuild: the patches do not apply" >&2; exit 1; }
}
if [[ -z $patches ]]; then
  restore_stamps
  pack a flashtrain "$tests"
elif [[ -n $a_from ]]; then
  rm -rf "$out/a" && mkdir -p "$out/a" && cp -p "$a_from"/a/* "$out/a/"
  echo "prebuild: a from $a_from/a" >&2
  apply_patches && restore_stamps
  pack b flashtrain_b "$tests" "$patches"
else
  restore_stamps
  pack a flashtrain OFF
  # No restore_stamps here: A's objects are newer than any earlier B's, so the patched files must
  # keep the new time stamps that apply gives them.
  apply_patches
  pack b flashtrain_b "$tests" "$patches"
fi
git -C "$src" reset -q --hard
