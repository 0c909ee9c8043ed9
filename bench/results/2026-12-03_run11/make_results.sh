#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-03 \
 --commit "3925ad9 full grid (run 9); d6dbc9f backward A/B (run 10); 28109f9 numerics and A/B, end to end (run 11); older sections marked" \
 --command "bash bench/results/2026-12-03_run11/make_results.sh; the runs: bench/results/2026-12-03_run11/about.txt (run10, run9, run8, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 9 at 3925ad9 (plot: results/2026-12-03_run9/bench.png)=$R/2026-12-03_run9/bench.md" \
 --section "sm90 backward since the full grid: d6dbc9f (st.shared dS and dQ stores, deterministic as a template parameter; new) against 6a74823 (base), fwd+bwd in one process, bf16 D 128, run 10 (last column base / new: below 1 means new is faster)=$R/2026-12-03_run10/ab_d6dbc9f_over_6a74823_d128.md" \
 --section "The same, bf16 D 64, run 10=$R/2026-12-03_run10/ab_d6dbc9f_over_6a74823_d64.md" \
 --section "Tried and dropped: the dQ GEMM before dK (this) against 28109f9 (base), run 11 call 4 (last column base / this: above 1 means base is faster)=$R/2026-12-03_run11/ab_dq_before_dk_over_28109f9.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 11 (bench/e2e/RESULTS.md; build 28109f9 plus the dropped reorder, 0.997x of 28109f9)=$R/2026-12-03_run11/e2e_paired.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 10 call 4 (6a74823 with deterministic as a template parameter)=$R/2026-12-03_run10/guard_cost_det_template.md" \
 --section "What limits the sm90 backward at 28109f9, bench/ncu_kernels.sh, run 11 call 2=$R/2026-12-03_run11/ncu_summary_28109f9.md" \
 --section "Its most stalled instructions, run 11 call 2=$R/2026-12-03_run11/ncu_bwd_d128_top_stalls_28109f9.txt" \
 --section "What limited the main kernels before 3925ad9, bench/ncu_kernels.sh, run 9 call 3 at 837f422=$R/2026-12-03_run9/ncu_summary_837f422.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda, run 11 call 2 at 28109f9=$R/2026-12-03_run11/doctor_bars_28109f9.txt" \
 --section "Issue 5, fp16 logits about 1e3: which forward's lse each backward is given, run 11 call 2 at 28109f9=$R/2026-12-03_run11/lse_swap_28109f9.txt" \
 --section "GPU check steps, run 9 at 3925ad9=$R/2026-12-03_run9/gpu_check_summary_3925ad9.txt" \
 --output bench/RESULTS.md
