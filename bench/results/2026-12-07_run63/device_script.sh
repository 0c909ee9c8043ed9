#!/bin/bash
# Run 63: one device call that does what the card that came allows (carry [".prebuild/out/main",
# ".prebuild/out/run63"]):
#   H200: run 57's script on main's prebuilt library (.prebuild/out/main): issue 6's full grid,
#   then issue 7's paired end-to-end Llama run;
#   otherwise: scripts/gpu_ab.sh on .prebuild/out/run63 (A: main; B: main + stats_scale_late_v2.patch
#   + fwd_shifted_rows.patch + wide_prefetch.patch + band_tail.patch): B's forward tests, the bf16
#   D 64 backward's multi-step ones, the wide D 256 backward's and the band order's,
#   racecheck of the new shifted D 64 forward case, then the A/B timing (cut to what the
#   device time left allows); D 256 (wide_prefetch alone) with deterministic rows in ab_2, then B
#   under FLASHTRAIN_BWD_BAND=1/4, 1/8 (bands of one head before a last band of 4 / 8) and 8
#   against main's rule (bands of 4) in ab_3 / ab_4 / ab_5;
#   Nsight Compute of the wide D 256 default backward at 8k, causal and not (what the causal
#   rows lose: bwd 331 against 360 TFLOP/s in run 59, where cuDNN's causal runs faster than its
#   non-causal) if the deadline leaves time; and bench/profile_kernels.py tables of the same shapes,
#   main and cuDNN, into profile.txt.
# Usage (device): [TESTS=filter] [BENCH=ab_builds options] [AB_DEADLINE=s] [NCU_CASES='...'] [PROFILE_DEADLINE=s] [DEADLINE=s (H200)] bash bench/results/2026-12-07_run63/device_script.sh OUTDIR [COMMIT]
set -u
[[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -lt 1 ]] && { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$1"
# At most 8 files come back: run 57's script writes seven (its summary names the GPU), the call's
# console.log is the eighth.
if [[ $gpu == *H200* ]]; then
  LIB_XZ=.prebuild/out/main/a/libflashtrain_torch.so.xz NS=flashtrain COMMIT="${2:-main}" DEADLINE=${DEADLINE:-570} \
    bash bench/results/2026-12-07_run57/device_script.sh "$1"
else
  echo "GPU $gpu" > "$1/gpu.txt"
  STEP_LIMIT=${STEP_LIMIT:-280} scripts/gpu_ab.sh "$1" --prebuilt .prebuild/out/run63 \
    --tests "${TESTS:-Shapes/Sm90Forward.*:Sm90ForwardDynamicTiles.*:Dtypes/CudaBackward.Sm90ShapesMultiStep/bf16:Dtypes/CudaBackward.Sm90FewStepsPerBlock/bf16:Dtypes/CudaBackward.Sm90WideKeyTiles*/bf16:Dtypes/CudaBackward.Sm90BandOnlyReordersBlocks/bf16:Sm90BackwardBand.*:Targets/Accuracy.*/cuda_bf16:Targets/MaskedRows.*/cuda_*}" \
    --race '*Sm90Forward*d64_right_window_shifted_rows' \
    --bench "${BENCH:---seqlens 2048,4096,8192,16384 --dims 64,128 --dtypes bf16,fp16}" \
    --bench "--seqlens 2048,4096,8192,16384 --dims 256 --dtypes bf16 --deterministic" \
    --bench "--seqlens 2048,4096,8192,16384 --dims 256 --dtypes bf16 --env-b FLASHTRAIN_BWD_BAND=1/4" \
    --bench "--seqlens 2048,4096,8192,16384 --dims 256 --dtypes bf16 --env-b FLASHTRAIN_BWD_BAND=1/8" \
    --bench "--seqlens 2048,4096,8192,16384 --dims 256 --dtypes bf16 --env-b FLASHTRAIN_BWD_BAND=8" \
    --ncu "${NCU_CASES-bwd_wide_kernel_sm90:8192:256:bf16:no bwd_wide_kernel_sm90:8192:256:bf16:yes}" --deadline ${AB_DEADLINE:-480}
  # Per-kernel times of one forward+backward in the benchmark's own sequence (torch.profiler), main
  # and cuDNN, D 256 bf16 8k, causal and not: where the causal backward's time goes outside ncu.
  lib=$(mktemp -d) && ${PYTHON:-python3} scripts/unxz.py \
    .prebuild/out/run63/a/libflashtrain_torch.so.xz "$lib/libflashtrain_torch.so"
  for backend in flashtrain cudnn; do
    for causal in "" --causal; do
      (( SECONDS > ${PROFILE_DEADLINE:-520} )) && { echo "profile: skipped ($SECONDS s)" >> "$1/profile.txt"; break 2; }
      FLASHTRAIN_TORCH_LIBRARY=$lib/libflashtrain_torch.so PYTHONPATH="$PWD/python:$PWD/bench" timeout 40 \
        ${PYTHON:-python3} bench/profile_kernels.py --seq 8192 --dim 256 --table --iters 5 --backend $backend $causal \
        2>&1 | grep -v -i warn >> "$1/profile.txt"
    done
  done
  # What comes back is at most 8 files: console.log, summary.txt, logs.tgz, ncu.tgz, ab.md,
  # ab_json.tgz and these in extra.tgz.
  cd "$1" || exit 1
  extra=$(ls -d gpu.txt profile.txt ncu.log ab_[0-9]*.md 2>/dev/null)
  [[ -n $extra ]] && tar czf extra.tgz $extra && rm -f $extra
  ls
fi
