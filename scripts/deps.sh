#!/usr/bin/env bash
# Installs flashtrain's build and test dependencies on Debian (skips what is installed) and the
# CUTLASS headers when nvcc is present. Used by scripts/test.sh and scripts/demo.sh.
# Usage: scripts/deps.sh [--python]   (--python adds PyTorch, pytest, numpy and matplotlib)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
need=()
pkgs=(cmake ninja-build g++ libgtest-dev python3-pip)
[[ "${1:-}" == "--python" ]] && pkgs+=(python3-torch libtorch-dev python3-pytest python3-numpy python3-setuptools python3-matplotlib)
for pkg in "${pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [[ ${#need[@]} -gt 0 ]]; then
  echo "==> installing ${need[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  scripts/fetch_cutlass.sh
fi
