#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-03 \
 --commit "76543f0 / e3e138b (run 13, the fp16 dS of the bf16 dQ GEMM); older sections marked" \
 --command "bash bench/results/2026-12-03_run13/make_results.sh; the runs: bench/results/2026-12-03_run13/about.txt (run12, run11, run10, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 13 at 76543f0, D 256 not built in this run (plot: results/2026-12-03_run13/bench.png)=$R/2026-12-03_run13/bench.md" \
 --section "The same grid at 7f28cf9 with D 256, run 12 (before the fp16 dS of the bf16 dQ GEMM)=$R/2026-12-03_run12/bench.md" \
 --section "What the fp16 dS of the bf16 dQ GEMM costs: 76543f0 (this) against main 21793d6 (base), run 13 call 2 (last column base / this: above 1 means base is faster)=$R/2026-12-03_run13/ab_fp16ds_over_21793d6.md" \
 --section "Why it costs: instructions in the sm90 bf16 backward's main loop, e3e138b (new) against 21793d6 (base), cuobjdump -sass (sass_loop_counts.py, on the CPU)=$R/2026-12-03_run13/sass_loop_counts.txt" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 12 at 7f28cf9, before run 13's bf16 backward change (bench/e2e/RESULTS.md)=$R/2026-12-03_run12/e2e_paired.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda --seeds 0-5, seed 0, run 13 call 1=$R/2026-12-03_run13/doctor_bars_seed0.txt" \
 --section "Issue 5 bars over seeds 0-5, run 13 call 1=$R/2026-12-03_run13/doctor_bars_seeds0to5.txt" \
 --section "Issue 5, where the default backward's dq error came from: float64 emulation of its roundings, GQA 16:1 and logits ~1e3 bf16, seeds 0-5 (ds_rounding_emulation.py, run on the CPU)=$R/2026-12-03_run12/ds_rounding_emulation.txt" \
 --section "Issue 5, the bf16 dQ product's scaled fp16 dS at extreme input magnitudes: float64 emulation of the kernel's scales (ds_scale_extremes.py, run on the CPU)=$R/2026-12-03_run13/ds_scale_extremes.txt" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 13 call 3 at e3e138b=$R/2026-12-03_run13/guard_cost.md" \
 --section "Tried and dropped: per-warp dQ reductions (this) against 7f28cf9 (base), run 12 call 1 (last column base / this: above 1 means base is faster)=$R/2026-12-03_run12/ab_warp_dq_slabs_over_7f28cf9.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --section "What limits the sm90 backward at 28109f9, bench/ncu_kernels.sh, run 11 call 2=$R/2026-12-03_run11/ncu_summary_28109f9.md" \
 --section "Its most stalled instructions, run 11 call 2=$R/2026-12-03_run11/ncu_bwd_d128_top_stalls_28109f9.txt" \
 --output bench/RESULTS.md
