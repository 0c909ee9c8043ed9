#!/usr/bin/env bash
# Diagnoses a crash of the PyTorch extension on a GPU machine: what the extension links and
# loads, a few single-call probes (each in its own process, so one crash does not hide the
# others), the CUDA cases of tests/python/test_attention.py under faulthandler, and, when
# something crashed and gdb is present, the same runs under gdb for the native backtrace.
# Everything is written under OUTDIR; summary.txt says what crashed.
#
# Usage: scripts/gpu_debug_torch.sh OUTDIR [--build]
#   --build   (re)configure and build the extension in BUILD_DIR first (the CMake flags of
#             scripts/gpu_check.sh --quick); done anyway when the library is missing
# Environment: BUILD_DIR (default build-gpu), PYTHON (default python3), FLASHTRAIN_CUDA_ARCHS
#   (default 90a), FLASHTRAIN_HDIMS (default "64;128"), JOBS (default nproc), STEP_TIMEOUT
#   (seconds per step, default 300; a probe gets at most 120).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
outdir=""
build_first=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build_first=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) [[ -n "$outdir" ]] && { echo "one OUTDIR only (see --help)" >&2; exit 2; }; outdir="$1" ;;
  esac
  shift
done
[[ -z "$outdir" ]] && { usage >&2; exit 2; }
mkdir -p "$outdir" && outdir=$(cd "$outdir" && pwd)

build=${BUILD_DIR:-build-gpu}
python=${PYTHON:-python3}
limit=${STEP_TIMEOUT:-300}
lib="$PWD/$build/python/flashtrain/libflashtrain_torch.so"
export FLASHTRAIN_TORCH_LIBRARY="$lib"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
summary="$outdir/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
# describe RC: "ok", "FAIL (rc N)" or the signal that killed the process.
describe() {
  local rc=$1
  if [[ $rc == 0 ]]; then echo "ok"
  elif [[ $rc == 124 ]]; then echo "TIMEOUT"
  elif [[ $rc -gt 128 ]]; then echo "CRASH (signal $((rc - 128)): $(kill -l $((rc - 128)) 2>/dev/null))"
  else echo "FAIL (rc $rc)"; fi
}

# ---- build -----------------------------------------------------------------------------------
if [[ $build_first == 1 || ! -f "$lib" ]]; then
  torch_dir=$($python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
  # The C++ suite needs GoogleTest, which the GPU machine has only as the copy carried in .gtest/.
  gtest_flags=(-DFLASHTRAIN_TESTS=OFF)
  [[ -d .gtest/lib/x86_64-linux-gnu/cmake/GTest ]] &&
    gtest_flags=(-DFLASHTRAIN_TESTS=ON "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest")
  {
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON \
      "-DFLASHTRAIN_CUDA_ARCHS=${FLASHTRAIN_CUDA_ARCHS:-90a}" "-DFLASHTRAIN_HDIMS=${FLASHTRAIN_HDIMS:-64;128}" \
      -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" "${gtest_flags[@]}" &&
      cmake --build "$build" --target flashtrain_torch -j "${JOBS:-$(nproc)}"
  } >"$outdir/build.log" 2>&1
  rc=$?
  note "build flashtrain_torch ($build): $(describe $rc) (log: build.log)"
  [[ $rc != 0 ]] && exit 1
fi

# ---- what the extension is and what it loads ---------------------------------------------------
{
  echo "== python / torch"
  $python - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
print("torch C++11 ABI:", torch.compiled_with_cxx11_abi())
print("cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
  echo "== compilers"; c++ --version 2>&1 | head -1; nvcc --version 2>&1 | tail -1
  echo "== grep CUDA_RUNTIME_LIBRARY / ABI in $build/CMakeCache.txt and the link line"
  grep -E "CMAKE_CUDA_RUNTIME_LIBRARY|CMAKE_CXX_COMPILER:|CMAKE_(SHARED|MODULE|EXE)_LINKER_FLAGS:|CMAKE_CXX_FLAGS:" "$build/CMakeCache.txt"
  echo "env: LDFLAGS='${LDFLAGS:-}' CXXFLAGS='${CXXFLAGS:-}' CFLAGS='${CFLAGS:-}'"
  grep -rhoE -- "-D_GLIBCXX_USE_CXX11_ABI=[01]" "$build/build.ninja" 2>/dev/null | sort | uniq -c
  grep -A3 "^build python/flashtrain/libflashtrain_torch.so" "$build/build.ninja" 2>/dev/null | grep LINK_LIBRARIES
  echo "== the extension's link command, and which libstdc++ the compiler links"
  ninja -C "$build" -t commands python/flashtrain/libflashtrain_torch.so 2>/dev/null | tail -1 | tr ' ' '\n' | grep -E "stdc|as-needed|static|^-l|\.so" | head -40
  cxx=$(grep -E "^CMAKE_CXX_COMPILER:" "$build/CMakeCache.txt" | cut -d= -f2)
  for f in libstdc++.so libstdc++.a; do p=$("$cxx" -print-file-name=$f); echo "$f -> $p"; ls -lL "$p" 2>&1 | head -1; done
  echo "== C++ runtime symbols torch's libraries export (non-zero: torch carries its own)"
  for l in libtorch_cpu.so libc10.so libtorch.so; do
    echo "$l: $(nm -D --defined-only "$($python -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib/$l" 2>/dev/null | grep -cE ' (__cxa_throw|__gxx_personality_v0|_ZNSt|_ZSt)')"
  done
  echo "== __cxa_* / personality the extension defines itself (non-empty: a static libstdc++ is inside)"
  nm -D --defined-only "$lib" 2>/dev/null | grep -E "__cxa_throw|__gxx_personality|_ZNSt7__cxx1112basic_string" | head -5
  echo "== readelf -d (NEEDED, RPATH)"; readelf -d "$lib" | grep -E "NEEDED|RPATH|RUNPATH"
  echo "== CUDA runtime functions DEFINED in the extension (non-empty: a static cudart is inside)"
  nm -D --defined-only "$lib" 2>/dev/null | grep -E " (cuda[A-Z]|__cuda)" | head -20
  echo "== libraries the process loads (after importing flashtrain and touching CUDA)"
  $python - <<'EOF'
import torch, flashtrain
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if any(s in path for s in ("cudart", "libstdc++", "libgcc_s", "gomp", "flashtrain", "libc10")):
        print(path)
EOF
} 2>&1 | awk '!seen[$0]++' >"$outdir/env.log"
note "environment: env.log"

# ---- probes: one call each, in its own process -----------------------------------------------
probe_code() {
  cat <<'EOF'
import faulthandler, sys
faulthandler.enable()
import torch, flashtrain
from flashtrain import ops
name = sys.argv[1]
def t(dtype, d, device):
    return torch.randn(1, 5, 2, d).to(dtype).to(device)
def expect_value_error(fn):
    try:
        fn()
    except ValueError as e:
        print("ValueError (expected):", str(e).splitlines()[0])
        return
    raise SystemExit("no ValueError")
if name == "cpu_backend_refused":    # the exception path alone, no CUDA involved
    q = t(torch.float32, 32, "cpu")
    expect_value_error(lambda: ops.backend(q, q, t(torch.float32, 32, "cpu")[..., :1, :]))
elif name == "cpu_fwd_refused":
    q, v = t(torch.float32, 32, "cpu"), t(torch.float32, 32, "cpu")
    expect_value_error(lambda: ops.fwd(q, q[:, :, :1], v[:, :, :, :16]))
elif name == "cuda_backend_ok":       # no exception
    q = t(torch.bfloat16, 64, "cuda")
    print("backend:", ops.backend(q, q, q))
elif name == "cuda_backend_refused":  # what cases.head_dims does first: fp32 / head dim 32 on CUDA
    q = t(torch.float32, 32, "cuda")
    expect_value_error(lambda: ops.backend(q, q, q))
elif name == "cuda_fwd_refused":
    q = t(torch.float32, 32, "cuda")
    expect_value_error(lambda: ops.fwd(q, q, q))
elif name == "cuda_fwd_ok":
    q = t(torch.bfloat16, 64, "cuda")
    out, lse = ops.fwd(q, q, q)
    torch.cuda.synchronize()
    print("fwd ok:", tuple(out.shape), bool(torch.isfinite(out).all()))
else:
    raise SystemExit("unknown probe " + name)
print("probe", name, "done")
EOF
}
probe_code >"$outdir/probe.py"
crashed_probe=""
for p in cpu_backend_refused cpu_fwd_refused cuda_backend_ok cuda_fwd_ok cuda_backend_refused cuda_fwd_refused; do
  timeout $((limit < 120 ? limit : 120)) $python -X faulthandler "$outdir/probe.py" "$p" >"$outdir/probe_$p.log" 2>&1
  rc=$?
  note "probe $(printf '%-22s' "$p") $(describe $rc) (log: probe_$p.log)"
  [[ $rc -gt 128 && -z "$crashed_probe" ]] && crashed_probe=$p
done

# ---- the failing pytest ----------------------------------------------------------------------
pytest_cmd=($python -X faulthandler -m pytest -x -q -p no:cacheprovider tests/python/test_attention.py -k cuda)
timeout "$limit" "${pytest_cmd[@]}" >"$outdir/pytest.log" 2>&1
pytest_rc=$?
note "pytest -x test_attention.py -k cuda: $(describe $pytest_rc) (log: pytest.log)"

# ---- native backtraces -----------------------------------------------------------------------
gdb_run() {  # gdb_run LOG CMD...
  local log=$1
  shift
  timeout "$limit" "$gdb" -q -batch -ex "set pagination off" -ex "set confirm off" \
    -ex "handle SIGPIPE nostop noprint" -ex run -ex bt -ex "info sharedlibrary" --args "$@" \
    >"$outdir/$log" 2>&1
  note "gdb: $log (bt after the crash; the frames below the signal name the failing function)"
}
if [[ -n "$crashed_probe" || $pytest_rc -gt 128 ]]; then
  gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
  if [[ -n "$gdb" ]]; then
    # One crash under gdb is enough (loading torch's symbols takes a while): the probe's if one
    # crashed, it is the smaller program; else the pytest run's.
    if [[ -n "$crashed_probe" ]]; then
      gdb_run "gdb_probe_$crashed_probe.log" $python "$outdir/probe.py" "$crashed_probe"
    else
      gdb_run gdb_pytest.log "${pytest_cmd[@]}"
    fi
  else
    note "gdb / cuda-gdb not found: no native backtrace (the faulthandler tracebacks are in the logs above)"
  fi
fi
echo "logs: $outdir"
[[ -z "$crashed_probe" && $pytest_rc == 0 ]]
