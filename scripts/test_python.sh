#!/usr/bin/env bash
# Builds the PyTorch extension (bindings/torch) with CMake against the torch of $PYTHON
# (default /usr/bin/python3, Debian's python3-torch) and runs the pytest suite (tests/python) on
# it: the CPU path always, CUDA tests when torch sees a GPU, the transformers test when
# transformers is importable.
#
# Usage: scripts/test_python.sh [--build-dir DIR] [pytest arguments...]
#   --build-dir DIR  CMake build directory (default: build-torch)
# Environment: PYTHON (interpreter with torch), JOBS (parallel jobs), FLASHTRAIN_CUDA=0/1 (force
# the CUDA backend off/on; default: on when torch has CUDA and nvcc is found),
# FLASHTRAIN_CUDA_ARCHS and FLASHTRAIN_HDIMS (passed to CMake).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-torch
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
if [[ "${1:-}" == "--build-dir" ]]; then build="$2"; shift 2; fi
python=${PYTHON:-/usr/bin/python3}
jobs=${JOBS:-$(nproc)}

# The torch package directory first: its libtorch must win over any system one.
prefix=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__) + ";" + torch.utils.cmake_prefix_path)')
torch_cuda=$("$python" -c 'import torch; print(1 if torch.version.cuda else 0)')
nvcc_bin=$(command -v nvcc || true)
[[ -z "$nvcc_bin" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
cuda=OFF
[[ "$torch_cuda" == 1 && -n "$nvcc_bin" ]] && cuda=ON
[[ "${FLASHTRAIN_CUDA:-}" == 1 ]] && cuda=ON
[[ "${FLASHTRAIN_CUDA:-}" == 0 ]] && cuda=OFF

args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_TORCH=ON -DFLASHTRAIN_TESTS=OFF
      -DFLASHTRAIN_CUDA=$cuda "-DCMAKE_PREFIX_PATH=$prefix")
[[ $cuda == ON ]] && args+=("-DCMAKE_CUDA_COMPILER=$nvcc_bin")
[[ -n "${FLASHTRAIN_CUDA_ARCHS:-}" ]] && args+=("-DFLASHTRAIN_CUDA_ARCHS=$FLASHTRAIN_CUDA_ARCHS")
[[ -n "${FLASHTRAIN_HDIMS:-}" ]] && args+=("-DFLASHTRAIN_HDIMS=$FLASHTRAIN_HDIMS")
command -v ninja >/dev/null && args+=(-G Ninja)

echo "==> configure the PyTorch extension ($("$python" -c 'import torch; print("torch", torch.__version__)'), CUDA=$cuda)"
cmake "${args[@]}" >/dev/null
echo "==> build flashtrain_torch"
cmake --build "$build" --target flashtrain_torch -j "$jobs"
echo "==> pytest tests/python"
export FLASHTRAIN_TORCH_LIBRARY="$(cd "$build" && pwd)/python/flashtrain/libflashtrain_torch.so"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
"$python" -m pytest -q -p no:cacheprovider tests/python "$@"
