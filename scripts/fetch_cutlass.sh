#!/usr/bin/env bash
# Extracts the CUTLASS/CuTe headers from the PyPI wheel nvidia-cutlass==4.2.0.0 into .cutlass/include.
# Usage: scripts/fetch_cutlass.sh   (idempotent; needs pip and PyPI access the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
[[ -f .cutlass/include/cute/tensor.hpp ]] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps nvidia-cutlass==4.2.0.0 -d "$tmp"
(cd "$tmp" && python3 -m zipfile -e nvidia_cutlass-4.2.0.0-py3-none-any.whl x >/dev/null)
mkdir -p .cutlass
rm -rf .cutlass/include
cp -r "$tmp/x/cutlass_library/source/include" .cutlass/include
echo "CUTLASS headers in .cutlass/include"
