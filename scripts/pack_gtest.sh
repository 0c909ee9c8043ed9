#!/usr/bin/env bash
# Copies this machine's GoogleTest (Debian libgtest-dev) into .gtest/ (git-ignored), so a call on
# the GPU machine, which has no GoogleTest, can carry it: run(carry=[".cutlass", ".gtest"]).
# scripts/gpu_check.sh picks it up. Usage: scripts/pack_gtest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
lib=/usr/lib/x86_64-linux-gnu
rm -rf .gtest && mkdir -p .gtest/include .gtest/lib/x86_64-linux-gnu/cmake
cp -r /usr/include/gtest /usr/include/gmock .gtest/include/
cp "$lib"/libgtest*.a "$lib"/libgmock*.a .gtest/lib/x86_64-linux-gnu/
cp -r "$lib"/cmake/GTest .gtest/lib/x86_64-linux-gnu/cmake/
grep -qx '/.gtest/' .git/info/exclude 2>/dev/null || echo '/.gtest/' >> .git/info/exclude
echo "GoogleTest copied to .gtest/"
