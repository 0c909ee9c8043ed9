#!/usr/bin/env python3
"""Run flashtrain's forward+backward on one shape a few times, for a profiler (ncu, nsys).

The grid of bench_attention.py keeps B*S = 16k tokens and H*D = 2048; this does the same for one
(S, D, dtype, causal) point, so `ncu --kernel-name regex:bwd_kernel_sm90 --launch-skip 1
--launch-count 1 python3 bench/profile_kernels.py --seq 8192 --dim 128` profiles the steady-state
backward of the benchmark's shape. With --table it profiles itself (torch.profiler) and prints
each CUDA kernel's launches and mean time per forward+backward, e.g. to see what the overflow
guard's empty safe-pass launches cost. --backend cudnn / flash runs torch SDPA's cuDNN or flash
(FlashAttention-2) backend on the same inputs instead, for a side-by-side kernel breakdown.
"""
import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--iters", type=int, default=3, help="forward+backward passes")
    ap.add_argument("--backend", default="flashtrain", choices=["flashtrain", "cudnn", "flash"],
                    help="flashtrain, or torch SDPA's cuDNN / flash backend (default flashtrain)")
    ap.add_argument("--table", action="store_true",
                    help="profile --iters passes after a warm-up and print a per-kernel time table")
    args = ap.parse_args()
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    b, h = max(1, 16384 // args.seq), 2048 // args.dim
    q, k, v = (torch.randn(b, args.seq, h, args.dim, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    dout = torch.ones(b, args.seq, h, args.dim, device="cuda", dtype=dtype)

    from bench_attention import flashtrain_runner, sdpa_runner  # the benchmark's own calls
    run = (flashtrain_runner(deterministic=args.deterministic) if args.backend == "flashtrain"
           else sdpa_runner(args.backend))

    def attend():
        return run(q, k, v, args.causal)

    def step():
        for t in (q, k, v):
            t.grad = None  # no gradient accumulation kernels in the profile
        attend().backward(dout)

    if args.table:
        rows = kernel_times(torch, step, args.iters)
        total = sum(us for _, us in rows.values())
        print(f"{args.backend}: seq {args.seq}, dim {args.dim}, {args.dtype}, causal {args.causal}: "
              f"{total:.1f} us of kernels per forward+backward ({args.iters} passes)")
        print("%10s %8s  %s" % ("us/pass", "launches", "kernel"))
        for name, (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            print("%10.1f %8.1f  %s" % (us, n, name[:110]))
        return
    for i in range(args.iters):
        step()
        torch.cuda.synchronize()
        print(f"iteration {i + 1}/{args.iters} done", flush=True)


def kernel_times(torch, step, iters):
    """{kernel name: (launches, microseconds) per call of step}, from torch.profiler over `iters`
    calls after a warm-up of 3. Also used by guard_cost.py."""
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
    return {name: (n / iters, t / iters) for name, (n, t) in rows.items()}


if __name__ == "__main__":
    main()
