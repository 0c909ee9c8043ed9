#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
# ncu_bwd_d128_stalls_ed4010a.txt came from the call-3 table with:
#   python3 bench/ncu_stalls.py bwd_kernel_sm90_s8192_d128_bf16_full.sass.csv --top 20 --regions \
#     'step top: Q wait + S issue:1109-1194,previous dQ staged + reduced:1195-1265,dP issue + row stats fetch:1266-1431,softmax + dV issue:1432-2058,dS + dK issue + fence:2059-2285,dS barrier:2286-2300,dQ GEMM + its wait:2301-2361,dQ scale + Q/dO refill:2362-2496'
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-03 \
 --commit "ed4010a (run 14, the dQ staged behind the next S^T); older sections marked" \
 --command "bash bench/results/2026-12-03_run14/make_results.sh; the runs: bench/results/2026-12-03_run14/about.txt (run13, run12, run11, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 14 at ed4010a, D 256 not built in this run (plot: results/2026-12-03_run14/bench.png)=$R/2026-12-03_run14/bench.md" \
 --section "The same grid at 7f28cf9 with D 256, run 12 (D 256 runs on the sm80 backward, which run 13 and 14 did not change)=$R/2026-12-03_run12/bench.md" \
 --section "What staging the dQ behind the next S^T gains: ed4010a (this) against fb04a33 (head), run 14 call 3 (last column head / this: below 1 means this is faster)=$R/2026-12-03_run14/ab_stage_dq_behind_s_over_fb04a33.md" \
 --section "Tried and dropped: issuing dP^T before the dQ staging too (dpe) against S^T only (rot5, kept), run 14 call 2 (last column rot5 / dpe: above 1 means rot5 is faster)=$R/2026-12-03_run14/ab_dp_early_vs_s_only.md" \
 --section "What limits the sm90 backward at ed4010a, bench/ncu_kernels.sh, run 14 call 3=$R/2026-12-03_run14/ncu_summary_ed4010a.md" \
 --section "The same at fb04a33, before the change, run 14 call 1=$R/2026-12-03_run14/ncu_summary_fb04a33.md" \
 --section "Where its warps stall at ed4010a, by instruction and by loop phase (bench/ncu_stalls.py), run 14 call 3=$R/2026-12-03_run14/ncu_bwd_d128_stalls_ed4010a.txt" \
 --section "Instructions in the sm90 bf16 D 128 backward's main loop, ed4010a (new) against fb04a33 (base), cuobjdump -sass (on the CPU)=$R/2026-12-03_run14/sass_loop_counts.txt" \
 --section "What the fp16 dS of the bf16 dQ GEMM costs as it stands on main: fb04a33 (this) against 21793d6 (base), run 14 call 1 (last column base / this: above 1 means base is faster)=$R/2026-12-03_run14/ab_fb04a33_over_21793d6.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 12 at 7f28cf9, before run 13's and 14's backward changes (bench/e2e/RESULTS.md)=$R/2026-12-03_run12/e2e_paired.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda --seeds 0-5, seed 0, run 13 call 1 (76543f0)=$R/2026-12-03_run13/doctor_bars_seed0.txt" \
 --section "Issue 5 bars over seeds 0-5, run 13 call 1=$R/2026-12-03_run13/doctor_bars_seeds0to5.txt" \
 --section "Issue 5, where the default backward's dq error came from: float64 emulation of its roundings, GQA 16:1 and logits ~1e3 bf16, seeds 0-5 (ds_rounding_emulation.py, run on the CPU)=$R/2026-12-03_run12/ds_rounding_emulation.txt" \
 --section "Issue 5, the bf16 dQ product's scaled fp16 dS at extreme input magnitudes: float64 emulation of the kernel's scales (ds_scale_extremes.py, run on the CPU)=$R/2026-12-03_run13/ds_scale_extremes.txt" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 13 call 3 at e3e138b=$R/2026-12-03_run13/guard_cost.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --output bench/RESULTS.md
