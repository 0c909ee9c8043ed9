#!/bin/bash
# Run 64: B = main + fwd_first_partial.patch (the causal forward's partial query block first,
# without negative rows: the first block computes rows [0, block_m), visits only the keys of its
# first block_m - row_shift rows and stores those with 16-byte stores). B's forward tests (all
# sm90 forward shapes, the dynamic tiles, Accuracy and MaskedRows on cuda), racecheck of the
# shifted D 64 case, then the A/B timing of D 64 / 128 at 2k-16k (cut to the deadline). Then, if
# time is left, run 63's B (fwd_shifted_rows.patch, negative rows), whose first causal D 64
# forward hit "an illegal instruction": compute-sanitizer memcheck of its smallest shifted case,
# for the faulting instruction, into memcheck63.log.
# Usage (device, carry [".prebuild/out/main", ".prebuild/out/run64", ".prebuild/out/run63"]):
#   [AB_DEADLINE=s] bash bench/results/2026-12-07_run64/device_script.sh OUTDIR
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
out=$1; mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > "$out/gpu.txt"
STEP_LIMIT=${STEP_LIMIT:-200} scripts/gpu_ab.sh "$out" --prebuilt .prebuild/out/run64 \
  --tests "${TESTS:-Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Sm90BlockMask.*:Targets/Accuracy.*/cuda_*:Targets/MaskedRows.*/cuda_*}" \
  --race '*Sm90Forward*d64_right_window_shifted_rows' \
  --bench "${BENCH:---seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16}" \
  --deadline ${AB_DEADLINE:-420}
if (( SECONDS < ${MEMCHECK_DEADLINE:-470} )) && [[ -f .prebuild/out/run63/b/flashtrain_tests.xz ]]; then
  t=/tmp/ft_b63_tests
  python3 scripts/unxz.py .prebuild/out/run63/b/flashtrain_tests.xz $t && chmod +x $t
  timeout 90 compute-sanitizer --tool memcheck --show-backtrace device $t \
    --gtest_filter='Shapes/Sm90Forward.MatchesReference/d64_192_rows_causal_tl' > "$out/memcheck63.log" 2>&1
  echo "memcheck exit $?" >> "$out/memcheck63.log"
  tail -c 20000 "$out/memcheck63.log" > "$out/m.tmp" && mv "$out/m.tmp" "$out/memcheck63.log"
fi
cd "$out" && ls
