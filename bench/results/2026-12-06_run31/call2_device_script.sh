#!/bin/bash
# Run 31 call 2: the sm90 forward with its softmax kept ahead of the wait for the previous P V
# (fwd_softmax_before_wait.patch: keep_before_wait, a shared store of the row sums, pins the
# softmax before WARPGROUP.DEPBAR, which ptxas otherwise hoists over it) against this tree by
# scripts/gpu_ab.sh --patch (D 64 / 128 / 256 built): B's forward tests and racecheck, the A/B
# (forward rows; the backward is unchanged), then Nsight Compute of the D 128 bf16 forward at S 8k
# on A and B (where its stall samples sit).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-06_run31/call2_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-06_run31
STEP_LIMIT=150 exec scripts/gpu_ab.sh "$1" --patch "$R/fwd_softmax_before_wait.patch" \
  --label-b run31fwd --hdims '64;128;256' \
  --tests '*Sm90Forward*:*CudaFwd*:*Accuracy*cuda*:*MaskedRows*cuda*' \
  --race '*Sm90Forward*d128_ragged*:*Sm90Forward*d256_causal_gqa*:*Sm90Forward*d64_window*' \
  --bench '--dims 64,128,256 --seqlens 2048,8192,16384 --dtypes bf16,fp16' \
  --ncu 'fwd_kernel_sm90:8192:128:bf16:no' --deadline 560
