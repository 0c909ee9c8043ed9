#!/usr/bin/env python3
"""Run flashtrain's forward+backward on one shape a few times, for a profiler (ncu, nsys).

The grid of bench_attention.py keeps B*S = 16k tokens and H*D = 2048; this does the same for one
(S, D, dtype, causal) point, so `ncu --kernel-name regex:bwd_kernel_sm90 --launch-skip 1
--launch-count 1 python3 bench/profile_kernels.py --seq 8192 --dim 128` profiles the steady-state
backward of the benchmark's shape.
"""
import argparse

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--iters", type=int, default=3, help="forward+backward passes")
    args = ap.parse_args()
    import flashtrain
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    b, h = max(1, 16384 // args.seq), 2048 // args.dim
    q, k, v = (torch.randn(b, args.seq, h, args.dim, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    for i in range(args.iters):
        out = flashtrain.flash_attn_func(q, k, v, causal=args.causal, deterministic=args.deterministic)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        print(f"iteration {i + 1}/{args.iters} done", flush=True)


if __name__ == "__main__":
    main()
