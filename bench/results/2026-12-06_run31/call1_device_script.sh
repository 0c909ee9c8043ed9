#!/bin/bash
# Run 31 call 1: the D 128 bf16 default backward with dQ(t - 1) in flight over the step boundary
# (dq_in_flight_bf16.patch: run 30's dq_in_flight.patch gated to bf16 at D 128 by kDqInFlight,
# without det_lag), against this tree by scripts/gpu_ab.sh --patch (D 128 built): B's backward
# tests and racecheck, the A/B at D 128 (fp16 and deterministic rows are null checks), Nsight
# Compute of the D 128 bf16 forward at S 8k (a first profile of it), then issue 7's paired
# end-to-end Llama run (bf16, S 4k-32k) on build B's extension.
# Usage (device, carry [".cutlass", ".gtest"]): COMMIT=<short sha> bash bench/results/2026-12-06_run31/call1_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-06_run31
out=$(mkdir -p "$1" && cd "$1" && pwd)
mkdir -p "$out/ab"
STEP_LIMIT=120 scripts/gpu_ab.sh "$out/ab" --patch "$R/dq_in_flight_bf16.patch" \
  --label-b run31 --hdims '128' \
  --tests '*CudaBackward*:*MaskedRows*cuda*:*Deterministic*cuda*' \
  --race '*Sm90ShapesMultiStep/bf16:*DeterministicSelfAttentionBitwise/bf16' \
  --bench '--dims 128 --deterministic --seqlens 2048,4096,8192,16384 --dtypes bf16,fp16' \
  --ncu 'fwd_kernel_sm90:8192:128:bf16:no' --deadline 330
# B's extension: build-ab-a after its rebuild as B, operators in torch.ops.flashtrain_b.
o=/tmp/e2e31; mkdir -p $o
left=$((560 - SECONDS - 25))
echo "e2e: $left s" | tee "$out/e2e_summary.txt"
FLASHTRAIN_COMMIT="${COMMIT:-unknown}+run31" FLASHTRAIN_TORCH_LIBRARY=$PWD/build-ab-a/python/flashtrain/libflashtrain_torch.so \
  FLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b PYTHONPATH=$PWD/python timeout $((left + 20)) python3 -u bench/e2e/run_e2e.py \
  --mode paired --out-dir $o/e2e --budget-seconds $left --paired-rounds 16 --seqs 4k,8k,16k,32k > $o/e2e.log 2>&1
echo "e2e paired: exit $? ($SECONDS s)" | tee -a "$out/e2e_summary.txt"
tail -25 $o/e2e.log | tee -a "$out/e2e_summary.txt"
tar czf "$out/e2e.tgz" -C /tmp e2e31  # e2e/paired.json, e2e/RESULTS.md, e2e.log (8 files at most come back)
