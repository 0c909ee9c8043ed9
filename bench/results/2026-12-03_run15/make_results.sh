#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
# e2e_paired.md is the paired section of bench/e2e/RESULTS.md after run 15's paired.json.
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-03 \
 --commit "b4ac2af (run 15 grid; main's edbcb5b differs only in not rotating the default dQ walk, see below); older sections marked" \
 --command "bash bench/results/2026-12-03_run15/make_results.sh; the runs: bench/results/2026-12-03_run15/about.txt (run14, run13, run12, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 15 at b4ac2af (the sm90 backward with a producer warpgroup), D 256 not built in this run; the causal default rows carry 2-5% that main no longer loses (plot: results/2026-12-03_run15/bench.png)=$R/2026-12-03_run15/bench.md" \
 --section "The same grid at 7f28cf9 with D 256, run 12 (D 256 runs on the sm80 backward, which runs 13 to 15 did not change)=$R/2026-12-03_run12/bench.md" \
 --section "What the producer warpgroup gains: b4ac2af (this; its default walk rotated) against 1d2dcd3 (head), run 15 call 3 (last column head / this: below 1 means this is faster)=$R/2026-12-03_run15/ab_b4ac2af_over_1d2dcd3.md" \
 --section "The producer warpgroup with the default walk not rotated (as on main; arrivals one per warp) against 1d2dcd3 (head), run 15 call 2=$R/2026-12-03_run15/ab_producer_perwarp_over_1d2dcd3.md" \
 --section "Not rotating the default walk again, and a dQ warp that waits for each step's reductions (dropped), 09afc6f (this) against b4ac2af, D 128, run 15 call 4=$R/2026-12-03_run15/ab_09afc6f_over_b4ac2af.md" \
 --section "Launching a head's key tiles in descending order under the deterministic rotated walk: 1d2dcd3 (this) against 33eb025 (base), run 15 call 1=$R/2026-12-03_run15/ab_det_launch_order_1d2dcd3_over_33eb025.md" \
 --section "What limits the sm90 backward at b4ac2af, bench/ncu_kernels.sh, run 15 call 3=$R/2026-12-03_run15/ncu_summary_b4ac2af.md" \
 --section "The same at ed4010a, before the producer warpgroup, run 14 call 3=$R/2026-12-03_run14/ncu_summary_ed4010a.md" \
 --section "Where its warps stall at b4ac2af, by instruction and by role and loop phase (bench/ncu_stalls.py), run 15 call 3=$R/2026-12-03_run15/ncu_bwd_d128_stalls_b4ac2af.txt" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 15 at b4ac2af (bench/e2e/RESULTS.md)=$R/2026-12-03_run15/e2e_paired.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda --seeds 0-5, seed 0, run 13 call 1 (76543f0)=$R/2026-12-03_run13/doctor_bars_seed0.txt" \
 --section "Issue 5 bars over seeds 0-5, run 13 call 1=$R/2026-12-03_run13/doctor_bars_seeds0to5.txt" \
 --section "Issue 5, where the default backward's dq error came from: float64 emulation of its roundings, GQA 16:1 and logits ~1e3 bf16, seeds 0-5 (ds_rounding_emulation.py, run on the CPU)=$R/2026-12-03_run12/ds_rounding_emulation.txt" \
 --section "Issue 5, the bf16 dQ product's scaled fp16 dS at extreme input magnitudes: float64 emulation of the kernel's scales (ds_scale_extremes.py, run on the CPU)=$R/2026-12-03_run13/ds_scale_extremes.txt" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 13 call 3 at e3e138b=$R/2026-12-03_run13/guard_cost.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --output bench/RESULTS.md
