#!/bin/bash
# Run 28 call 1: the D 256 split-D backward with its loop rotated (step t's dQ additions and stage
# release at the top of step t + 1, after that step's S^T GEMM is issued) and scale * dQ carried in
# registers of its own (split_scaled_copy.patch; scripts/ptxas_check.sh: no C751x note, which run
# 27's two forms had), against this tree by scripts/gpu_ab.sh --patch: A built (D 256), B rebuilt
# incrementally with the patch; on B the D 256 backward tests (90 s at most) and racecheck of
# Sm90ShapesMultiStep (bf16); the A/B in one process (default and deterministic, bf16 and fp16,
# S 2k-16k); the build logs' spills and C751x notes in the output.
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-07_run28/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
STEP_LIMIT=90 exec scripts/gpu_ab.sh "$1" --patch bench/results/2026-12-07_run28/split_scaled_copy.patch \
  --label-b scaled_copy --hdims 256 \
  --tests '*Sm90SplitD*:*Sm90ShapesMultiStep*:*Sm90FewSteps*:*ClusterPair*:*DeterministicSelfAttentionBitwise*:*DeterministicCausalBeyondOneWave*' \
  --race '*Sm90ShapesMultiStep/bf16' \
  --bench '--dims 256 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16'
