#!/bin/bash
# Run 30 call 3: the deterministic backward's rotated dQ walk in groups of at most one wave of key
# tiles where a head's tiles exceed one wave without a causal mask (dq_grouped_rotation.patch:
# tile_range.h's grouped order and dq_rotation_group, the sm90 launcher and kernels passing it on;
# the wavefront order ran there before), against this tree by scripts/gpu_ab.sh --patch (D 64 and
# 256 built): B's deterministic tests beyond one wave (no mask: grouped; causal: as before) and
# the CPU schedule tests, then the A/B of the D 256 deterministic backward at S 8k (one group: a
# null check) and 16k (256 key tiles: grouped).
# Usage (device, carry [".cutlass", ".gtest"]): bash bench/results/2026-12-07_run30/call3_device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
R=bench/results/2026-12-07_run30
STEP_LIMIT=150 exec scripts/gpu_ab.sh "$1" --patch "$R/dq_grouped_rotation.patch" \
  --label-b grouped --hdims '64;256' \
  --tests '*BeyondOneWave*:*DeterministicSelfAttentionBitwise*:*Sm90DeterministicClusterPairs*:BackwardTileOrder.*' \
  --race '' \
  --bench '--dims 256 --deterministic --seqlens 8192,16384 --dtypes bf16,fp16' --deadline 540
