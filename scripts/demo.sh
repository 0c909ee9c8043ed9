#!/usr/bin/env bash
# The README's first command: installs what is missing, builds flashtrain (with CUDA when nvcc is
# present) and runs `flashtrain doctor`, the stability suite, on every backend this machine has.
# Usage: scripts/demo.sh [doctor options...]   (e.g. --quick; see `build/flashtrain doctor --help`)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
scripts/deps.sh
cuda=OFF
nvcc_bin=$(command -v nvcc || true)
[[ -z "$nvcc_bin" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc_bin" ]] && cuda=ON
echo "==> building (CUDA=$cuda)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=$cuda \
  ${nvcc_bin:+-DCMAKE_CUDA_COMPILER=$nvcc_bin} "-DFLASHTRAIN_HDIMS=${FLASHTRAIN_HDIMS:-64}" >/dev/null
cmake --build build -j "$(nproc)" --target flashtrain_cli
echo "==> flashtrain doctor"
exec build/flashtrain doctor "$@"
