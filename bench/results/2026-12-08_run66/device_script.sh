#!/bin/bash
# Run 66: one device call for two candidates that touch disjoint kernels, in one build B against
# main (A), each judged on its own rows (about.txt):
#   v3          bench/results/2026-12-07_run64/fwd_first_partial_v3.patch (run 65's candidate, which
#               never ran): the causal forward's partial query block first, the block mask's
#               unmasked range as key-tile indices - judged on the forward columns;
#   descending  det_descending.patch (this folder): the sm90 deterministic backward's descending dQ
#               walk - judged on the deterministic backward columns.
# The default-mode backward is the same code in A and B (a null check). Steps: B's tests (forward
# shapes, block mask, CudaBackward, Deterministic, Accuracy and MaskedRows on cuda), racecheck (the
# shifted-rows forward, the deterministic cases whose walks now descend), the A/B of bf16 D 64 / 128
# / 256 at S 2k-16k, default and deterministic, then fp16 D 64 / 128 default, then ncu of the D 128
# bf16 4k forward (A and B) while DEADLINE allows.
# B comes from .prebuild/out/run66 (prebuilt on the CPU machine, about 25 min on 2 cores):
#   scripts/prebuild.sh .prebuild/out/run66 --patch \
#     'bench/results/2026-12-07_run64/fwd_first_partial_v3.patch bench/results/2026-12-08_run66/det_descending.patch' --tests
# carry [".prebuild/out/run66", ".cutlass"]. Without it both are built here from the patches (carry
# [".cutlass", ".gtest"]; the builds take about 300 s of the call, so fewer tests and rows).
# At most 8 files come back: ab.md, ab.json, ab_2.md, ab_2.json, summary.txt, logs.tgz, ncu.tgz,
# ncu.log; console.log is the caller's (the GPU named first), so OUTDIR/ab holds the rest.
# Usage (device): [DEADLINE=s] bash bench/results/2026-12-08_run66/device_script.sh OUTDIR > OUTDIR/console.log 2>&1
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1/ab
mkdir -p "$out"
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
patches='bench/results/2026-12-07_run64/fwd_first_partial_v3.patch bench/results/2026-12-08_run66/det_descending.patch'
fwd_tests='Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Sm90BlockMask.*'
race='*Sm90Forward*d64_right_window_shifted_rows:*DeterministicSelfAttentionBitwise/bf16:*DeterministicWindowVarlenBitwise/bf16'
if [[ -f .prebuild/out/run66/b/libflashtrain_torch.so.xz ]]; then
  STEP_LIMIT=${STEP_LIMIT:-200} scripts/gpu_ab.sh "$out" --prebuilt .prebuild/out/run66 --label-b v3_descending \
    --tests "$fwd_tests:*CudaBackward*:*Deterministic*cuda*:*Accuracy*cuda*:*MaskedRows*cuda*" --race "$race" \
    --bench '--seqlens 2048,4096,8192,16384 --dims 64,128,256 --dtypes bf16 --deterministic' \
    --bench '--seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes fp16' \
    --ncu 'fwd_kernel_sm90:4096:128:bf16:no' --deadline ${DEADLINE:-520}
else
  STEP_LIMIT=${STEP_LIMIT:-100} scripts/gpu_ab.sh "$out" --patch "$patches" --hdims '64;128;256' --label-b v3_descending \
    --tests "$fwd_tests:*Determinis*:*Sm90WideKeyTiles*" --race '*DeterministicSelfAttentionBitwise/bf16' \
    --bench '--seqlens 4096,16384 --dims 64,128,256 --dtypes bf16 --deterministic'
fi
ls -R "$1"
