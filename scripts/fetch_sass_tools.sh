#!/usr/bin/env bash
# Fetches cuobjdump and nvdisasm (NVIDIA's PyPI redistributables; the CUDA install on the dev
# machine has nvcc and ptxas but not these) into .sass-tools/, for reading the SASS of a compiled
# object on a machine without a GPU:
#   scripts/fetch_sass_tools.sh && .sass-tools/cuobjdump -sass build-sm90/CMakeFiles/flashtrain.dir/src/cuda/instantiations/bwd_hdim128_bf16_sm90.cu.o
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
dest=.sass-tools
[[ -x $dest/cuobjdump && -x $dest/nvdisasm ]] && { echo "$dest: already there"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps -d "$tmp" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
mkdir -p "$dest"
for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
find "$tmp/x" -type f \( -name cuobjdump -o -name nvdisasm \) -exec cp {} "$dest/" \;
chmod +x "$dest"/cuobjdump "$dest"/nvdisasm
"$dest/cuobjdump" --version | tail -1
