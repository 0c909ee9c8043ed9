#!/usr/bin/env bash
# GPU harness (DESIGN.md §4): on a machine with an NVIDIA GPU, builds flashtrain with the CUDA
# backend, runs the C++ suite (which runs its CUDA cases when a GPU is present), `flashtrain
# doctor`, a compute-sanitizer memcheck pass on a small case and the benchmark, writing the log
# of every step (and the benchmark's JSON) under OUTDIR. Later steps run even when an earlier one
# fails; the exit status is non-zero when any step failed. A summary table is printed last.
#
# Usage: scripts/gpu_check.sh OUTDIR [--quick] [--part cpp|python|all]
#   --quick   build head dims 64 and 128 for sm_90a only, and run the benchmark's --quick grid
#   --part    cpp: build, the C++ suites, sm90 forward check, doctor, memcheck; python: build (a
#             no-op when the same build dir is there), pytest, the Python doctor and the benchmarks;
#             all (default): both. Two calls with the same BUILD_DIR split a run too long for one limit.
# Environment: FLASHTRAIN_CUDA_ARCHS (default "80;90a"), FLASHTRAIN_HDIMS (default all:
#   "64;96;128;192;256"), BUILD_DIR (default build-gpu), JOBS (default nproc), STEP_TIMEOUT
#   (seconds per step, default 900), SKIP_STEPS (a bash regex: steps whose name matches it are
#   skipped, e.g. 'pytest|doctor' to fit one device call; configure and build always run).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
outdir=""
quick=0
part=all
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --part)
      part=${2:-}
      [[ "$part" =~ ^(cpp|python|all)$ ]] || { echo "--part takes cpp, python or all (see --help)" >&2; exit 2; }
      shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) [[ -n "$outdir" ]] && { echo "one OUTDIR only (see --help)" >&2; exit 2; }; outdir="$1" ;;
  esac
  shift
done
[[ -z "$outdir" ]] && { usage >&2; exit 2; }
mkdir -p "$outdir" && outdir=$(cd "$outdir" && pwd)

if [[ $quick == 1 ]]; then
  archs=${FLASHTRAIN_CUDA_ARCHS:-90a}
  hdims=${FLASHTRAIN_HDIMS:-64;128}
else
  archs=${FLASHTRAIN_CUDA_ARCHS:-80;90a}
  hdims=${FLASHTRAIN_HDIMS:-64;96;128;192;256}
fi
build=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
python=${PYTHON:-python3}

names=()
results=()
seconds=()
failed=0
# step NAME LOGFILE CMD...: runs CMD with its output in OUTDIR/LOGFILE, records status and time.
# A command (not a shell function) runs under `timeout`, in the background so that a TERM to this
# script (an outer time limit) reaches it at once: on_term stops the step's whole process group
# (timeout leads one; a benchmark's child processes would otherwise outlive the script) and
# prints the summary of the steps so far.
current="" current_name="" current_t0=0
step() {
  local name=$1 log=$2
  shift 2
  if [[ -n "${SKIP_STEPS:-}" && ! "$name" =~ ^(configure|build\ \() && "$name" =~ ${SKIP_STEPS} ]]; then
    skip "$name" "SKIP_STEPS"
    return 1
  fi
  printf '==> %-22s (log: %s)\n' "$name" "$outdir/$log"
  local t0=$SECONDS rc
  if declare -F "$1" >/dev/null; then
    "$@" >"$outdir/$log" 2>&1
    rc=$?
  else
    timeout "${STEP_TIMEOUT:-900}" "$@" >"$outdir/$log" 2>&1 &
    current=$! current_name=$name current_t0=$t0
    wait "$current"
    rc=$?
    current=""
  fi
  names+=("$name")
  seconds+=($((SECONDS - t0)))
  if [[ $rc == 0 ]]; then results+=("ok"); else results+=("FAIL (rc $rc)"); failed=1; fi
  return $rc
}
skip() {
  names+=("$1")
  results+=("skipped: $2")
  seconds+=(0)
}

# The steps so far, the ctest tally and the benchmark table.
summary() {
  echo
  echo "flashtrain gpu_check ($(date -u '+%Y-%m-%d %H:%M UTC'), commit ${FLASHTRAIN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')})"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  printf '%-34s %-8s %s\n' "step" "seconds" "result"
  for i in "${!names[@]}"; do printf '%-34s %-8s %s\n' "${names[$i]}" "${seconds[$i]}" "${results[$i]}"; done
  if [[ -f "$outdir/ctest.log" ]]; then grep -E 'tests passed|tests failed' "$outdir/ctest.log" | tail -1; fi
  if [[ -f "$outdir/bench.md" ]]; then echo; cat "$outdir/bench.md"; fi
  echo "logs: $outdir"
}

on_term() {
  if [[ -n "$current" ]]; then
    kill -TERM -- "-$current" 2>/dev/null || kill -TERM "$current" 2>/dev/null
    names+=("$current_name"); seconds+=($((SECONDS - current_t0))); results+=("stopped: TERM (time limit)")
  fi
  summary | tee "$outdir/summary.txt"
  exit 143
}
trap on_term TERM INT

# ---- machine -------------------------------------------------------------------------------
step "nvidia-smi" nvidia-smi.log nvidia-smi

# ---- configure and build ---------------------------------------------------------------------
# The benchmark needs the PyTorch extension; build it only when the benchmark and torch are there.
bench=bench/bench_attention.py
torch_dir=""
if [[ -f $bench ]] && $python -c 'import torch' >/dev/null 2>&1; then
  torch_dir=$($python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
fi
# The GPU machine has no GoogleTest: a copy carried in .gtest/ (scripts/pack_gtest.sh) is used when present.
gtest_flags=()
[[ -d .gtest/lib/x86_64-linux-gnu/cmake/GTest ]] && gtest_flags=("-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest")
configure() {
  local torch_flags=()
  [[ -n "$torch_dir" ]] && torch_flags=(-DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir")
  # The extension needs a compiler that links the shared libstdc++ torch uses (see
  # bindings/torch/CMakeLists.txt); the system g++ does, whatever CXX points at.
  if [[ -n "$torch_dir" && -x /usr/bin/g++ ]]; then
    torch_flags+=(-DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++)
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON \
    "-DFLASHTRAIN_CUDA_ARCHS=$archs" "-DFLASHTRAIN_HDIMS=$hdims" -DFLASHTRAIN_TESTS=ON \
    "${torch_flags[@]}" "${gtest_flags[@]}" && return 0
  if [[ -n "$torch_dir" ]]; then  # the extension must not stop the C++ checks
    echo "!! configure with the PyTorch extension failed; retrying without it (no benchmark)"
    torch_dir=""
    cmake -S . -B "$build" -DFLASHTRAIN_TORCH=OFF "${gtest_flags[@]}"
  else
    return 1
  fi
}
step "configure" configure.log configure
built=0
step "build ($archs; $hdims)" build.log cmake --build "$build" -j "$jobs" && built=1

# ---- tests -----------------------------------------------------------------------------------
lib="$PWD/$build/python/flashtrain/libflashtrain_torch.so"
# The sm90 forward's own check (reference comparison on 21 cases) and throughput table.
sm90_tool=0
if [[ $built == 1 && "$archs" == *90a* ]] && nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -Iinclude \
     -Isrc bench/sm90_fwd_check.cu "$build/libflashtrain.a" -Xcompiler -fopenmp -o "$build/sm90_fwd_check" \
     >"$outdir/sm90_build.log" 2>&1; then
  sm90_tool=1
fi
if [[ $built == 1 && $part != python ]]; then
  step "ctest" ctest.log ctest --test-dir "$build" --output-on-failure -j 4 --timeout 600
  step "sm80 path (FLASHTRAIN_DISABLE_SM90=1)" tests_sm80_forward.log env FLASHTRAIN_DISABLE_SM90=1 \
    "$build/flashtrain_tests" --gtest_filter='*cuda*:*Cuda*:*CUDA*'
  if [[ $sm90_tool == 1 ]]; then
    step "sm90 forward check" sm90_check.log "$build/sm90_fwd_check" --check
  else
    skip "sm90 forward check" "sm_90a not built (see sm90_build.log)"
  fi
  # Issue 5 diagnostic (informational, never fails the check): do wgmma's dot products depend on
  # which operand is A? The sm90 forward computes S with Q as A, the backward S^T with K as A.
  if [[ "$archs" == *90a* ]] && nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
       -Isrc -I"${FLASHTRAIN_CUTLASS_DIR:-$PWD/.cutlass/include}" bench/wgmma_role_check.cu -o "$build/wgmma_role_check" \
       >"$outdir/wgmma_role_build.log" 2>&1; then
    step "wgmma role check (informational)" wgmma_role.log bash -c "'$build/wgmma_role_check'; echo \"exit \$?\""
  fi
  # The opt-in AMX bf16 forward of the CPU backend (the GPU machine's CPU has AMX; CI's does not).
  step "CPU AMX (FLASHTRAIN_CPU_AMX=1)" tests_cpu_amx.log env FLASHTRAIN_CPU_AMX=1 \
    "$build/flashtrain_tests" --gtest_filter='CpuAmx*:*Accuracy*cpu_bf16*:*MaskedRows*cpu_bf16*'
fi
if [[ $built == 1 && $part != cpp ]]; then
  if [[ -n "$torch_dir" && -f "$lib" ]]; then
    step "pytest (CUDA, transformers)" pytest.log env FLASHTRAIN_TORCH_LIBRARY="$lib" \
      PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" $python -X faulthandler -m pytest -q -rs -p no:cacheprovider tests/python
    grep -q "Fatal Python error" "$outdir/pytest.log" && scripts/gpu_debug_torch.sh "$outdir/torch_debug" >/dev/null 2>&1
    step "checkpoint bench" bench_checkpoint.log env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
      FLASHTRAIN_TORCH_LIBRARY="$lib" $python bench/bench_checkpoint.py --json "$outdir/bench_checkpoint.json" \
      --markdown "$outdir/bench_checkpoint.md"
    # Issue 5's bars: flashtrain (default and precision="high") against torch SDPA's backends.
    step "python doctor (CUDA)" doctor_python.log env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
      FLASHTRAIN_TORCH_LIBRARY="$lib" $python -m flashtrain.doctor --device cuda
  else
    skip "pytest" "torch or its extension build is not available"
  fi
  [[ $sm90_tool == 1 ]] && step "sm90 forward bench" sm90_bench.log "$build/sm90_fwd_check" --bench
fi

# ---- benchmark -------------------------------------------------------------------------------
if [[ $part == cpp ]]; then
  :
elif [[ ! -f $bench ]]; then
  skip "benchmark" "$bench does not exist"
elif [[ -z "$torch_dir" ]]; then
  skip "benchmark" "torch or its extension build is not available"
elif [[ $built == 0 ]]; then
  skip "benchmark" "build failed"
else
  # Issue 3's memory bar: peak extra memory of fwd+bwd at B=1, H=16, D=128, S=65536 (bf16).
  step "memory S=65536" bench_memory.log env PYTHONPATH="$PWD/python:$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" \
    FLASHTRAIN_TORCH_LIBRARY="$PWD/$build/python/flashtrain/libflashtrain_torch.so" \
    $python "$bench" --seqlens 65536 --dims 128 --dtypes bf16 --causal no --reps 3 \
    --json "$outdir/bench_memory.json" --markdown "$outdir/bench_memory.md"
  bench_args=(--json "$outdir/bench.json" --markdown "$outdir/bench.md" --deterministic --precision-high)
  [[ $quick == 1 ]] && bench_args+=(--quick)
  step "benchmark" bench.log env PYTHONPATH="$PWD/python:$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" \
    FLASHTRAIN_TORCH_LIBRARY="$PWD/$build/python/flashtrain/libflashtrain_torch.so" \
    $python "$bench" "${bench_args[@]}"
  $python bench/plot_bench.py "$outdir/bench.json" --out "$outdir/bench.png" >/dev/null 2>&1 || true
  # Issue 5's guard bar: the same code built with -DFLASHTRAIN_GUARD=OFF (head dim 128, and 64
  # with the full grid) under its own op namespace, timed against this build in one process.
  guard_hdims="128"; guard_seqlens="1024,4096"; guard_dims="128"; guard_dtypes="bf16"
  [[ $quick == 0 ]] && { guard_hdims="64;128"; guard_seqlens="1024,4096,16384"; guard_dims="64,128"; guard_dtypes="bf16,fp16"; }
  guard_build() {
    cmake -S . -B "$build-noguard" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_GUARD=OFF \
      -DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_noguard \
      "-DFLASHTRAIN_CUDA_ARCHS=$archs" "-DFLASHTRAIN_HDIMS=$guard_hdims" -DFLASHTRAIN_TESTS=OFF -DFLASHTRAIN_TORCH=ON \
      "-DTorch_DIR=$torch_dir" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ &&
      cmake --build "$build-noguard" -j "$jobs" --target flashtrain_torch
  }
  step "build, guard off" build_noguard.log guard_build &&
    step "guard cost" guard_cost.log env PYTHONPATH="$PWD/python" $python bench/guard_cost.py \
      --guarded "$lib" --unguarded "$PWD/$build-noguard/python/flashtrain/libflashtrain_torch.so" \
      --seqlens "$guard_seqlens" --dims "$guard_dims" --dtypes "$guard_dtypes" \
      --markdown "$outdir/guard_cost.md" --json "$outdir/guard_cost.json"
fi

# ---- memcheck and doctor (after the benchmark: the slowest checks last) ------------------------
if [[ $part == python ]]; then
  :
elif [[ $built == 1 ]]; then
  # Small CUDA cases under memcheck: out-of-bounds or misaligned accesses, uninitialised reads.
  if command -v compute-sanitizer >/dev/null 2>&1; then
    filter='*Cuda*Small*bf16*'  # one dtype: memcheck slows kernels 10-100x
    if "$build/flashtrain_tests" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -q '^  '; then
      step "memcheck (tests $filter)" memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$build/flashtrain_tests" --gtest_filter="$filter"
    else
      step "memcheck (doctor --quick)" memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$build/flashtrain" doctor --backend cuda --quick
    fi
    # Shared-memory hazards of the sm90 backward (default mode with many steps per block;
    # deterministic, rotated order) and of the split safe pass (bf16 precision=high runs it on
    # every path).
    race='*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16:*PrecisionHighOnEveryBackwardPath/bf16'
    step "racecheck (tests $race)" racecheck.log compute-sanitizer --tool racecheck --error-exitcode 1 \
      "$build/flashtrain_tests" --gtest_filter="$race"
    # The guard's rerun on 3 blocks, each walking many tiles through the same shared memory.
    step "racecheck (safe pass, 3 blocks)" racecheck_safe.log compute-sanitizer --tool racecheck --error-exitcode 1 \
      "$build/flashtrain_tests" --gtest_filter='*SafePassWalksManyTilesPerBlock/fp16'

  else
    skip "memcheck" "compute-sanitizer not found"
  fi
  # The CPU rows of the stress suite run in ctest (doctor_cpu); here the CUDA backend's.
  step "doctor --backend cuda" doctor.log "$build/flashtrain" doctor --backend cuda
else
  skip "ctest" "build failed"
  skip "doctor" "build failed"
  skip "memcheck" "build failed"
fi

# ---- summary ---------------------------------------------------------------------------------
summary | tee "$outdir/summary.txt"
exit $failed
