#!/usr/bin/env python3
"""CPU benchmark: flashtrain's CPU backend against torch's CPU SDPA flash kernel, same process,
same inputs (B=1, H=8, S=2048, D in {64, 128}, fp32 and bf16, non-causal unless --causal).
GFLOP/s with fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5 * fwd; median wall time, the
two libraries' runs interleaved.

Usage: python3 bench/bench_cpu.py [--seqlen 2048] [--heads 8] [--dims 64,128]
                                  [--dtypes fp32,bf16] [--causal no|yes|both] [--reps 5]
                                  [--markdown FILE] [--json FILE]
"""
import argparse
import json
import sys
import time

import torch


def median_s(fns, reps):
    """Median seconds of each of fns. The reps are interleaved (each rep runs every fn once) so
    that load from other processes on a shared machine falls on all of them alike."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--causal", default="no", choices=["no", "yes", "both"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args()
    import flashtrain
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def torch_run(q, k, v, causal):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)

    def ft_run(q, k, v, causal):
        return flashtrain.flash_attn_func(q, k, v, causal=causal)

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    causals = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]
    rows = []
    grid = [(dt, d, c) for dt in args.dtypes.split(",") for d in map(int, args.dims.split(",")) for c in causals]
    for i, (dt, d, causal) in enumerate(grid):
        s, h = args.seqlen, args.heads
        q, k, v, g = (torch.randn(1, s, h, d, dtype=dtypes[dt]) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        flops = 4.0 * h * s * s * d * (0.5 if causal else 1.0)
        row = {"dtype": dt, "dim": d, "seqlen": s, "heads": h, "causal": causal, "threads": torch.get_num_threads()}
        def fwd(run):
            def f():
                with torch.no_grad():
                    run(q, k, v, causal)
            return f

        def fwd_bwd(run):
            return lambda: torch.autograd.grad(run(q, k, v, causal), (q, k, v), g)
        runs = (("flashtrain", ft_run), ("torch", torch_run))
        tf = median_s([fwd(run) for _, run in runs], args.reps)
        ta = median_s([fwd_bwd(run) for _, run in runs], args.reps)
        for (name, _), f_s, a_s in zip(runs, tf, ta):
            row[name] = {"fwd_gflops": flops / f_s / 1e9, "fwdbwd_gflops": 3.5 * flops / a_s / 1e9}
        rows.append(row)
        print(f"[{i + 1}/{len(grid)}] {dt} D={d} causal={causal}", file=sys.stderr, flush=True)
    lines = [f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}. GFLOP/s fwd / fwd+bwd.", "",
             "| dtype | D | S | causal | flashtrain | torch SDPA flash (CPU) | ratio fwd | ratio fwd+bwd |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["flashtrain"], r["torch"]
        lines.append(f"| {r['dtype']} | {r['dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                     f"{a['fwd_gflops']:.0f} / {a['fwdbwd_gflops']:.0f} | {b['fwd_gflops']:.0f} / {b['fwdbwd_gflops']:.0f} | "
                     f"{a['fwd_gflops'] / b['fwd_gflops']:.2f} | {a['fwdbwd_gflops'] / b['fwdbwd_gflops']:.2f} |")
    table = "\n".join(lines) + "\n"
    if args.markdown:
        open(args.markdown, "w").write(table)
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)
    print(table)


if __name__ == "__main__":
    main()
