#!/bin/bash
# Run 30 call 1: the D 64 / 128 default backward with dQ(t - 1) in flight over the step boundary
# (dq_in_flight.patch: dK retired and stage t released at the end of step t as on main; dQ retired
# at the top of step t + 1 before its S^T issue) and the deterministic kernel on that same lagged
# path (det_lag.patch: kLag for both), against this tree by scripts/gpu_ab.sh --patch
# (D 128 and 256 built; the patch touches D 64 / 128 only): B's backward tests and racecheck, the
# A/B at D 128, then Nsight Compute of both builds: the D 128 fp16 backward at S 8k (where run 29's
# dK-in-flight lost 9%) and the D 256 pair kernel at bf16 S 8k (where its warps stall:
# ncu.tgz's .sass.csv, for bench/ncu_stalls.py --regions).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-07_run30/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-07_run30
STEP_LIMIT=120 exec scripts/gpu_ab.sh "$1" --patch "$R/dq_in_flight.patch $R/det_lag.patch" \
  --label-b run30 --hdims '128;256' \
  --tests '*CudaBackward*:*MaskedRows*cuda*' \
  --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--dims 128 --deterministic --seqlens 2048,8192,16384 --dtypes bf16,fp16' \
  --ncu 'bwd_kernel_sm90:8192:128:fp16:no bwd_split_kernel_sm90:8192:256:bf16:no' --deadline 540
