#!/usr/bin/env bash
# flashtrain's test command (the README's, and CI's through .ci/run).
# Installs what it needs on a Debian machine, builds the library, the CLI and the tests (CUDA
# kernels are compiled for sm_90a when nvcc is present, so they cannot rot unseen; they run only
# where a GPU is), runs the C++ suite, the README example, `flashtrain doctor`, and pytest.
#
# Usage: scripts/test.sh [--no-python] [--build-dir DIR]
#   --no-python      skip the PyTorch extension and pytest
#   --build-dir DIR  build directory (default: build)
# Environment: FLASHTRAIN_HDIMS (CUDA head dims to compile; default 64), JOBS (parallel jobs).
set -euo pipefail
cd "$(dirname "$0")/.."

python=1
build=build
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-python) python=0 ;;
    --build-dir) build="$2"; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
jobs=${JOBS:-$(nproc)}

step() { printf '\n==> %s\n' "$*"; }

# ---- dependencies -------------------------------------------------------------------------
if [[ $python == 1 ]]; then scripts/deps.sh --python; else scripts/deps.sh; fi
cuda=OFF
nvcc_bin=$(command -v nvcc || true)
[[ -z "$nvcc_bin" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc_bin" ]] && cuda=ON

# ---- build and C++ tests ---------------------------------------------------------------------
step "configure (CUDA=$cuda)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=$cuda \
  ${nvcc_bin:+-DCMAKE_CUDA_COMPILER=$nvcc_bin} -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=${FLASHTRAIN_HDIMS:-64}" >/dev/null
step "build"
cmake --build "$build" -j "$jobs"
step "C++ tests (ctest)"
ctest --test-dir "$build" --output-on-failure -j "$jobs"

# ---- Python ---------------------------------------------------------------------------------
if [[ $python == 1 ]]; then
  step "PyTorch extension and pytest"
  scripts/test_python.sh
fi
step "all tests passed"
