#!/usr/bin/env bash
# Regenerates bench/RESULTS.md from the run files (run from the repository root).
set -euo pipefail
R=bench/results
python3 bench/make_results.py --gpu "NVIDIA H200" --date 2026-12-04 \
 --commit "4473c5c (run 19 grid; the kernels on main but the D 64 default bf16 backward, 2.5-8% faster at S >= 4k since 18cc97c by run 20 call 4); older sections marked" \
 --command "bash bench/results/2026-12-04_run20/make_results.sh; the runs: bench/results/2026-12-04_run20/about.txt and 2026-12-04_run19/about.txt (run18, run17, run16, run15, run14, run13, run12, run7 about.txt for the older sections)" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 19 at 4473c5c, every backend and flashtrain's deterministic and precision \"high\" backward timed in alternation rep by rep (bench_attention.py since 964d9a3), D 256 not built in this run (plot: results/2026-12-04_run19/bench.png)=$R/2026-12-04_run19/bench.md" \
 --section "D 64 default bf16 backward takes K's fp16 copy and the tile maxima from the statistics warps (18cc97c) against main ce3bcbd, run 20 call 4; D 128 and deterministic rows are null checks (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run20/ab_call4_d64_stats_kcopy_over_main.md" \
 --section "Not landed: dK / dV written before the last dQ, and the bf16 K copy from the statistics warps on every kernel (c96b65c) against main, run 20 call 3 (the D 64 default part landed in 18cc97c; D 128 bf16 ran 12-14% slower; below 1 means this is faster)=$R/2026-12-04_run20/ab_call3_tail_kcopy_over_main.md" \
 --section "Not landed: the D 128 default backward with dK in flight across the step boundary against ce3bcbd, run 20 call 1 (below 1 means this is faster)=$R/2026-12-04_run20/ab_call1_dk_in_flight_over_main.md" \
 --section "bf16 against fp16, D 128 backward at S 4k causal: what limits each, bench/ncu_kernels.sh, run 20 call 2 at ce3bcbd=$R/2026-12-04_run20/ncu_summary_bwd_d128_4k_causal_call2.md" \
 --section "bf16 against fp16, D 128 backward at S 4k causal: executed instructions by opcode (bench/ncu_stalls.py --opcodes --versus), run 20 call 2=$R/2026-12-04_run20/ncu_bwd_d128_s4096_causal_opcodes_bf16_vs_fp16_call2.txt" \
 --section "Per-block timeline of the bf16 D 128 backward at S 4k causal (bench/bwd_trace.py), run 20 call 2=$R/2026-12-04_run20/bwd_trace_call2_bf16_4096causal.txt" \
 --section "The same timeline in fp16=$R/2026-12-04_run20/bwd_trace_call2_fp16_4096causal.txt" \
 --section "End-to-end Llama (4 layers, 7B dims) on the not-landed dK-in-flight kernel (2.5-9% slower D 128 backward), run 20 call 1: how little the e2e run resolves=$R/2026-12-04_run20/e2e_paired_call1_dk_in_flight.md" \
 --section "D 64 backward hands the staged dQ over after the S^T wait, and D 64 forward 192-key tiles without a mask (the tree of 532b0d0, with the later hand-over at D 128 too, which 532b0d0 dropped) against 0023b48, run 19 call 1 (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run19/ab_call1_late_dq_d64_tile192_over_0023b48.md" \
 --section "D 64 forward 192-key tiles against 128-key tiles at 2k / 4k, one build, FLASHTRAIN_FWD_KEY_TILE per side (ab_builds.py --env-a / --env-b), run 19 call 3 at 4473c5c (forward speed column: above 1 means 192-key tiles are faster; causal rows run 128-key tiles on both sides)=$R/2026-12-04_run19/ab_call3_keytile_d64_192_over_128.md" \
 --section "A quarter of the D 64 forward's exp2 by polynomial on the FMA pipe (964d9a3, reverted in 0dc5294) against 532b0d0, run 19 call 2 (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run19/ab_call2_poly_exp2_d64_over_532b0d0.md" \
 --section "What limits the D 64 forward (192-key tiles), bench/ncu_kernels.sh, run 19 call 1=$R/2026-12-04_run19/ncu_summary_fwd_d64_call1.md" \
 --section "Where the D 64 forward's warps stall (bench/ncu_stalls.py), run 19 call 1=$R/2026-12-04_run19/ncu_fwd_d64_s8192_stalls_call1.txt" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 18 at 1e0fcce (dK / dV epilogue staged in shared memory), backends timed one after the other, D 256 not built in this run (plot: results/2026-12-04_run18/bench.png)=$R/2026-12-04_run18/bench.md" \
 --section "dK / dV staged in shared memory and written in 16-byte chunks (the tree of 1e0fcce) against c9388f1, run 18 call 2 (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run18/ab_call2_epilogue_over_c9388f1.md" \
 --section "Where a backward block's time goes after that change: per-block phase timeline (bench/bwd_trace.py), bf16 D 128 S 2k non-causal, run 18 call 2=$R/2026-12-04_run18/bwd_trace_d128_2048.txt" \
 --section "The same timeline at S 8k=$R/2026-12-04_run18/bwd_trace_d128_8192.txt" \
 --section "What limits the sm90 backward at 1e0fcce, bench/ncu_kernels.sh, run 18 call 4=$R/2026-12-04_run18/ncu_summary_1e0fcce.md" \
 --section "A persistent default backward (dropped: the tile loop spilled the step loop's registers) against c9388f1, run 18 call 1 (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run18/ab_call1_persistent_over_c9388f1.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 18 call 3 at 1e0fcce (bench/e2e/RESULTS.md)=$R/2026-12-04_run18/e2e_paired_1e0fcce.md" \
 --section "Attention fwd and bwd against torch SDPA flash (FlashAttention-2) and cuDNN, full grid, run 17 at 9c4b770, before run 18's epilogue (plot: results/2026-12-04_run17/bench.png)=$R/2026-12-04_run17/bench.md" \
 --section "The same grid at 7f28cf9 with D 256, run 12 (D 256 runs on the sm80 backward, which runs 13 to 17 did not change)=$R/2026-12-03_run12/bench.md" \
 --section "Backward consumers a step apart, second one starting half a step late (1146a4d with a runtime switch) against 0e79cb1, run 17 call 1 (speed columns base / this: below 1 means this is faster)=$R/2026-12-04_run17/ab_call1_over_0e79cb1.md" \
 --section "Full grid at 1146a4d, run 17 call 2: the deterministic kernel with the same lag (dropped for it in 9c4b770)=$R/2026-12-04_run17/grid_1146a4d.md" \
 --section "What limits the sm90 backward at 1146a4d (the default kernel on main), bench/ncu_kernels.sh, run 17 call 2=$R/2026-12-04_run17/ncu_summary_1146a4d.md" \
 --section "What limits the sm90 kernels at 866079c, bench/ncu_kernels.sh, run 16 call 2=$R/2026-12-03_run16/ncu_summary_866079c.md" \
 --section "Where the forward's warps stall at 866079c (bench/ncu_stalls.py), run 16 call 2=$R/2026-12-03_run16/ncu_fwd_d128_stalls_866079c.txt" \
 --section "Where the backward's warps stall at b4ac2af (before run 17's change), by instruction and by role and loop phase (bench/ncu_stalls.py), run 15 call 3=$R/2026-12-03_run15/ncu_bwd_d128_stalls_b4ac2af.txt" \
 --section "Forward 176-key tiles at D 128 without a mask from Sk 8k: 866079c (this) against 95c0c20 (base), run 16 call 2 (speed columns base / this: below 1 means this is faster)=$R/2026-12-03_run16/ab_866079c_over_95c0c20.md" \
 --section "176-key tiles forced at Sk 4096 (FLASHTRAIN_FWD_KEY_TILE set to 176) against 95c0c20, run 16 call 2 (above 1: forced 176 is slower)=$R/2026-12-03_run16/ab_forced176_4k_over_95c0c20.md" \
 --section "What the producer warpgroup gains: b4ac2af (this; its default walk rotated) against 1d2dcd3 (head), run 15 call 3 (last column head / this: below 1 means this is faster)=$R/2026-12-03_run15/ab_b4ac2af_over_1d2dcd3.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 17 call 2 at 1146a4d (printed table; its files did not come back)=$R/2026-12-04_run17/e2e_paired_1146a4d.md" \
 --section "End-to-end Llama (4 layers, 7B dims), flashtrain against torch SDPA in one process, run 16 at 866079c (bench/e2e/RESULTS.md)=$R/2026-12-03_run16/e2e_paired.md" \
 --section "Issue 5 error bars, python -m flashtrain.doctor --device cuda --seeds 0-5, seed 0, run 13 call 1 (76543f0)=$R/2026-12-03_run13/doctor_bars_seed0.txt" \
 --section "Issue 5 bars over seeds 0-5, run 13 call 1=$R/2026-12-03_run13/doctor_bars_seeds0to5.txt" \
 --section "Issue 5, where the default backward's dq error came from: float64 emulation of its roundings, GQA 16:1 and logits ~1e3 bf16, seeds 0-5 (ds_rounding_emulation.py, run on the CPU)=$R/2026-12-03_run12/ds_rounding_emulation.txt" \
 --section "Issue 5, the bf16 dQ product's scaled fp16 dS at extreme input magnitudes: float64 emulation of the kernel's scales (ds_scale_extremes.py, run on the CPU)=$R/2026-12-03_run13/ds_scale_extremes.txt" \
 --section "Overflow guard cost, guarded over the FLASHTRAIN_GUARD OFF build in one process, run 13 call 3 at e3e138b=$R/2026-12-03_run13/guard_cost.md" \
 --section "Peak memory at S 65536, run 7=$R/2026-12-03_run7/bench_memory.md" \
 --output bench/RESULTS.md
