#!/usr/bin/env python3
"""Run flashtrain's forward+backward on one shape a few times, for a profiler (ncu, nsys).

The grid of bench_attention.py keeps B*S = 16k tokens and H*D = 2048; this does the same for one
(S, D, dtype, causal) point, so `ncu --kernel-name regex:bwd_kernel_sm90 --launch-skip 1
--launch-count 1 python3 bench/profile_kernels.py --seq 8192 --dim 128` profiles the steady-state
backward of the benchmark's shape.

With --table it profiles itself (torch.profiler) and prints each CUDA kernel's launches and mean
time per forward+backward, e.g. to see what the overflow guard's empty safe-pass launches cost;
--dim, --dtype and --causal then take lists (64,128 / bf16,fp16 / yes,no) and every combination
is profiled in this one process; --json writes the tables.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--dim", default="128", help="head dim (with --table: a comma list)")
    ap.add_argument("--dtype", default="bf16", help="bf16 or fp16 (with --table: a comma list)")
    ap.add_argument("--causal", nargs="?", const="yes", default="no",
                    help="bare --causal: causal; with --table a comma list of yes/no")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--iters", type=int, default=3, help="forward+backward passes")
    ap.add_argument("--table", action="store_true",
                    help="profile --iters passes after a warm-up and print a per-kernel time table")
    ap.add_argument("--json", help="with --table: write every table to this JSON file")
    args = ap.parse_args()
    configs = [(int(d), dt, c == "yes") for d in args.dim.split(",") for dt in args.dtype.split(",")
               for c in args.causal.split(",")]
    if not args.table and len(configs) != 1:
        ap.error("lists of --dim/--dtype/--causal need --table")
    import torch

    import flashtrain

    tables = []
    for dim, dtype_name, causal in configs:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
        b, h = max(1, 16384 // args.seq), 2048 // dim
        q, k, v = (torch.randn(b, args.seq, h, dim, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        dout = torch.ones(b, args.seq, h, dim, device="cuda", dtype=dtype)

        def step():
            for t in (q, k, v):
                t.grad = None  # no gradient accumulation kernels in the profile
            out = flashtrain.flash_attn_func(q, k, v, causal=causal, deterministic=args.deterministic)
            out.backward(dout)

        if not args.table:
            for i in range(args.iters):
                step()
                torch.cuda.synchronize()
                print(f"iteration {i + 1}/{args.iters} done", flush=True)
            return
        tables.append(kernel_table(torch, step, args.iters,
                                   {"seq": args.seq, "dim": dim, "dtype": dtype_name, "causal": causal}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(tables, f, indent=1)


def kernel_table(torch, step, iters, config):
    """Prints per-kernel launches and mean microseconds per forward+backward over `iters` passes;
    returns them with the config."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        n, t = rows.get(e.name, (0, 0.0))
        rows[e.name] = (n + 1, t + e.device_time)
    total = sum(t for _, t in rows.values()) / iters
    print(f"seq {config['seq']}, dim {config['dim']}, {config['dtype']}, causal {config['causal']}: "
          f"{total:.1f} us of kernels per forward+backward ({iters} passes)")
    print("%10s %8s  %s" % ("us/pass", "launches", "kernel"))
    kernels = []
    for name, (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print("%10.1f %8.1f  %s" % (t / iters, n / iters, name[:110]))
        kernels.append({"kernel": name, "us": t / iters, "launches": n / iters})
    return {**config, "total_us": total, "kernels": kernels}


if __name__ == "__main__":
    main()
