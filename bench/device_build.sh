#!/bin/bash
# The device calls' one build (bench/results/*/call*_device_script.sh): configures and builds
# flashtrain for sm_90a with the C++ tests and the torch extension, against the CUTLASS headers
# and GoogleTest carried in .cutlass / .gtest, all cores. Prints the build's exit status (and, on
# stderr, how many C751x notes ptxas gave, wgmmas serialised or waits injected; scripts/ptxas_check.sh checks here).
# EXTRA_CMAKE: more configure arguments (e.g. -DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b for the
# B side of bench/ab_builds.py).
# Usage (repository root): bash bench/device_build.sh BUILD_DIR "64;128;256" LOG
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 3 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTRAIN_CUDA=ON -DFLASHTRAIN_CUDA_ARCHS=90a \
  "-DFLASHTRAIN_HDIMS=$2" -DFLASHTRAIN_TESTS=ON -DFLASHTRAIN_TORCH=ON "-DTorch_DIR=$torch_dir" \
  "-DFLASHTRAIN_CUTLASS_DIR=$PWD/.cutlass/include" -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  "-DGTest_DIR=$PWD/.gtest/lib/x86_64-linux-gnu/cmake/GTest" ${EXTRA_CMAKE:-} > "$3" 2>&1 &&
  cmake --build "$1" -j "$(nproc)" --target flashtrain_tests flashtrain_torch >> "$3" 2>&1
rc=$?
# ptxas's C751x notes (wgmmas serialised, C7514 / C7515 / C7518, or a wait injected, C7517) are
# info lines, easy to miss among the warnings: say them.
n=$(grep -cE "C751[0-9]" "$3")
(( n == 0 )) || echo "device_build: $n C751x notes (wgmmas serialised / waits injected) in $3" >&2
echo $rc
