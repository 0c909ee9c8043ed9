#!/bin/bash
# Run 32 call 1: the D 256 split-D backward's dQ additions as one vector reduction per column pair
# at [row address + immediate] under one bounds branch a row (dq_reduce_rows.patch:
# bwd_dq_atomics_sm90.h) instead of sm80::add_dq_tile's per-element address, branch and atomicAdd,
# against this tree by scripts/gpu_ab.sh --patch (D 256 built): B's D 256 backward tests and
# racecheck, the A/B at D 256 (default and deterministic), then Nsight Compute of the pair kernel at
# bf16 S 8k on A and B (long_scoreboard, the loop's stall reasons).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-06_run32/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-06_run32
STEP_LIMIT=150 exec scripts/gpu_ab.sh "$1" --patch "$R/dq_reduce_rows.patch" \
  --label-b run32 --hdims '256' \
  --tests '*Sm90SplitD*:*Sm90ClusterPair*:*Sm90DeterministicClusterPairs*:*DeterministicCausalBeyondOneWave*:*EveryHeadDim*' \
  --race '*Sm90ClusterPairMatchesSingleBlocks/bf16:*Sm90SplitDMasksAndShapes/bf16' \
  --bench '--dims 256 --deterministic --seqlens 2048,4096,8192,16384 --dtypes bf16,fp16' \
  --ncu 'bwd_split_kernel_sm90:8192:256:bf16:no' --deadline 540
