#!/bin/bash
# Run 29 call 1, two changes in build B against this tree (scripts/gpu_ab.sh --patch, D 128 and 256):
#  - exchange_behind_s.patch: the D 256 pair kernel sums dQ (exchange_dq) at the top of the next
#    step, behind its S^T GEMM, on the scaled copies;
#  - d128_dk_in_flight.patch: the D 64 / 128 default backward issues dQ(t - 1) before dK(t) and
#    leaves dK in flight into step t + 1 (retired after its S^T issue), in a form ptxas does not
#    serialise (run 20's version of it, 3-9% slower, was never checked for C751x notes).
# B's backward tests and racecheck, the A/B in one process, then (if time is left) Nsight Compute
# of A's D 256 pair kernel at bf16 S 8k.
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-06_run29/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-06_run29
STEP_LIMIT=120 exec scripts/gpu_ab.sh "$1" --patch "$R/exchange_behind_s.patch $R/d128_dk_in_flight.patch" \
  --label-b run29 --hdims '128;256' \
  --tests '*CudaBackward*:*MaskedRows*cuda*' \
  --race '*Sm90ShapesMultiStep/bf16:*Sm90ClusterPairMatchesSingleBlocks/bf16' \
  --bench '--dims 128,256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16' \
  --ncu 'bwd_split_kernel_sm90:8192:256:bf16:no' --deadline 530
