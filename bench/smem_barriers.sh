#!/usr/bin/env bash
# Compiles bench/smem_barriers.cu (host code, no GPU needed; the CUTLASS headers in .cutlass) and
# writes the sm90 backward kernels' mbarrier offsets as JSON to OUT (default stdout), for
#   python3 bench/ncu_stalls.py TABLE.sass.csv --barriers OUT --kernel 'bwd_kernel_sm90 d128 fp16'
# Usage: bench/smem_barriers.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
[[ -d .cutlass/include ]] || { echo "smem_barriers: .cutlass/include missing (scripts/fetch_cutlass.sh)" >&2; exit 2; }
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
nvcc -std=c++17 --expt-relaxed-constexpr -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED=1 '-DFLASHTRAIN_HDIMS_BUILT="64;128;256"' \
  -DFLASHTRAIN_WITH_CUDA=1 -Iinclude -Isrc -I.cutlass/include -Xcompiler=-Wno-invalid-offsetof \
  bench/smem_barriers.cu -o "$bin"
if [[ -n "${1:-}" ]]; then "$bin" > "$1"; else "$bin"; fi
