#!/bin/bash
# Run 29 call 1: the D 256 pair kernel summing dQ (exchange_dq) at the top of the next step, behind
# its S^T GEMM, on the scaled copies (exchange_behind_s.patch), against this tree by
# scripts/gpu_ab.sh --patch (D 256 only): B's D 256 backward tests and racecheck of the pair test,
# the A/B in one process, then Nsight Compute of A's pair kernel at bf16 S 8k (what bounds it now,
# and where its warps stall: ncu/*.sass.csv for bench/ncu_stalls.py).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-06_run29/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
STEP_LIMIT=90 exec scripts/gpu_ab.sh "$1" --patch bench/results/2026-12-06_run29/exchange_behind_s.patch \
  --label-b exchange_behind_s --hdims 256 \
  --tests '*Sm90SplitD*:*Sm90ShapesMultiStep*:*Sm90FewSteps*:*ClusterPair*:*DeterministicSelfAttentionBitwise*:*DeterministicCausalBeyondOneWave*' \
  --race '*Sm90ClusterPairMatchesSingleBlocks/bf16' \
  --bench '--dims 256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16' \
  --ncu 'bwd_split_kernel_sm90:8192:256:bf16:no' --deadline 530
