#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-03 \
 --commit "7f28cf9 full grid, numerics, end to end (run 12); older sections marked" \
 --command "bash bench/results/2026-12-03_run12/make_results.sh; the runs: bench/results/2026-12-03_run12/about.txt (run11, run10, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 12 at 7f28cf9 (plot: results/2026-12-03_run12/bench.png)=$R/2026-12-03_run12/bench.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 12 at 7f28cf9 (bench/e2e/RESULTS.md)=$R/2026-12-03_run12/e2e_paired.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda, run 12 call 2=$R/2026-12-03_run12/doctor_bars_seed0.txt" \
 --section "Issue 5 bars over seeds 0-5 with the runner-up (torch's second best fused backend over its best), bar_spread.py over run 12 call 2's doctor tables=$R/2026-12-03_run12/bar_spread.txt" \
 --section "Issue 5, fp16 logits about 1e3: which forward's lse each backward is given, run 12 call 2 (after the rescale fix)=$R/2026-12-03_run12/lse_swap_sm90fwd_7f28cf9.txt" \
 --section "Issue 5, where the default backward's dq error comes from: float64 emulation of its roundings, GQA 16:1 and logits ~1e3 bf16, seeds 0-5 (ds_rounding_emulation.py, run on the CPU)=$R/2026-12-03_run12/ds_rounding_emulation.txt" \
 --section "Tried and dropped: per-warp dQ reductions (this) against 7f28cf9 (base), run 12 call 1 (last column base / this: above 1 means base is faster)=$R/2026-12-03_run12/ab_warp_dq_slabs_over_7f28cf9.md" \
 --section "Tried and dropped: the dQ GEMM before dK (this) against 28109f9 (base), run 11 call 4=$R/2026-12-03_run11/ab_dq_before_dk_over_28109f9.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 10 call 4 (6a74823 with deterministic as a template parameter)=$R/2026-12-03_run10/guard_cost_det_template.md" \
 --section "What limits the sm90 backward at 28109f9, bench/ncu_kernels.sh, run 11 call 2=$R/2026-12-03_run11/ncu_summary_28109f9.md" \
 --section "Its most stalled instructions, run 11 call 2=$R/2026-12-03_run11/ncu_bwd_d128_top_stalls_28109f9.txt" \
 --output bench/RESULTS.md
