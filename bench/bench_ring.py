#!/usr/bin/env python3
"""Scaling efficiency of ring attention (flashtrain.distributed) against one device.

Launch one process per GPU with torchrun; every rank holds the zig-zag shard (S / N tokens) of
one long sequence and runs ring_flash_attn_func forward, backward and forward+backward. In the
same job, rank 0 alone runs single-device flashtrain (flash_attn_func) on the full sequence while
the other ranks wait: the baseline T1. Times are wall-clock per iteration (all ranks start
together after a barrier; the iteration ends when the slowest rank is done), median over --reps
after --warmup. Scaling efficiency = T1 / (N * T_N); 1.0 is perfect. FLOPs as in
bench_attention.py: fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5 * fwd; TFLOP/s per device
= FLOPs / (N * T_N). Defaults: B = 1, H*D = 2048 (H = 16, D = 128), bf16, S = 64k, 128k, 256k,
causal and not.

Usage:
  torchrun --nproc_per_node 4 bench/bench_ring.py --json ring_4gpu.json
  torchrun --nproc_per_node 2 bench/bench_ring.py --json ring_2gpu.json
  python3 bench/bench_ring.py --json ring_1gpu.json          # one device (ring of one)
  torchrun --nproc_per_node 2 bench/bench_ring.py --device cpu --dtype fp32 \\
      --seqlens 256,512 --heads 2 --dim 32 --reps 2           # CPU smoke test over gloo
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", default="65536,131072,262144",
                    help="global sequence lengths, comma-separated (multiples of 2 * N)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16, help="query heads")
    ap.add_argument("--heads-k", type=int, default=None, help="K/V heads (GQA); default --heads")
    ap.add_argument("--dim", type=int, default=128, help="head dim of q, k and v")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--reps", type=int, default=5, help="timed iterations per measurement")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the single-device run on the full sequence (no efficiency)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cuda (default): NCCL ranks, one GPU each; cpu: gloo ranks")
    ap.add_argument("--json", help="rank 0 writes the results to this JSON file")
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------------------------
# Process group


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(device_kind):
    """Joins the torchrun job (RANK / WORLD_SIZE / LOCAL_RANK), or makes a group of one when
    launched without torchrun. Returns the torch.device of this rank."""
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if "RANK" in os.environ:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if device_kind == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend)
    else:
        local_rank = 0
        if device_kind == "cuda":
            torch.cuda.set_device(0)
        dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % _free_port(),
                                rank=0, world_size=1)
    return torch.device("cuda", local_rank) if device_kind == "cuda" else torch.device("cpu")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, reps, warmup, ranks_together=True):
    """Median wall-clock ms of fn() per iteration. With ranks_together, every iteration starts
    after a barrier and counts until the slowest rank is done (max over ranks)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if ranks_together:
            dist.barrier()
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    if ranks_together:
        times_t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(times_t, op=dist.ReduceOp.MAX)
        times = times_t.tolist()
    return statistics.median(times)


def measure(run, q, k, v, dout, device, reps, warmup, ranks_together):
    """fwd, bwd and fwd+bwd median ms of run(q, k, v) -> out."""
    def fwd():
        with torch.no_grad():
            run(q, k, v)

    out = run(q, k, v)

    def bwd():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def fwd_bwd():
        torch.autograd.grad(run(q, k, v), (q, k, v), dout)

    result = {"fwd_ms": median_ms(fwd, device, reps, warmup, ranks_together),
              "bwd_ms": median_ms(bwd, device, reps, warmup, ranks_together),
              "fwdbwd_ms": median_ms(fwd_bwd, device, reps, warmup, ranks_together)}
    del out
    return result


def _inputs(batch, seqlen, heads, heads_k, dim, dtype, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    shapes = [(batch, seqlen, heads, dim), (batch, seqlen, heads_k, dim),
              (batch, seqlen, heads_k, dim), (batch, seqlen, heads, dim)]
    tensors = [torch.randn(s, generator=gen, device=device, dtype=torch.float32).to(dtype)
               for s in shapes]
    for t in tensors[:3]:
        t.requires_grad_(True)
    return tensors


def _add_rates(entry, flops, devices):
    for key, factor in (("fwd", 1.0), ("bwd", 2.5), ("fwdbwd", 3.5)):
        entry[key + "_tflops_per_device"] = factor * flops / (devices * entry[key + "_ms"]) / 1e9


# ------------------------------------------------------------------------------------------------


def run_case(args, device, seqlen, causal, seed):
    import flashtrain
    from flashtrain.distributed import ring_flash_attn_func

    rank, world_size = dist.get_rank(), dist.get_world_size()
    dtype, heads_k = DTYPES[args.dtype], args.heads_k or args.heads
    if seqlen % (2 * world_size) != 0:
        raise ValueError("S = %d is not a multiple of 2 * N = %d" % (seqlen, 2 * world_size))
    flops = 4.0 * args.batch * args.heads * seqlen * seqlen * args.dim * (0.5 if causal else 1.0)
    row = {"seqlen": seqlen, "causal": causal, "dtype": args.dtype, "batch": args.batch,
           "heads": args.heads, "heads_k": heads_k, "dim": args.dim, "world_size": world_size}

    # This rank's zig-zag shard, drawn directly (the full sequence never exists on N ranks).
    shard = _inputs(args.batch, seqlen // world_size, args.heads, heads_k, args.dim, dtype, device,
                    seed * 1000 + rank)
    ring = measure(lambda q, k, v: ring_flash_attn_func(q, k, v, causal=causal), *shard, device,
                   args.reps, args.warmup, ranks_together=True)
    _add_rates(ring, flops, world_size)
    row["ring"] = ring
    del shard

    if not args.no_baseline:
        if rank == 0:
            full = _inputs(args.batch, seqlen, args.heads, heads_k, args.dim, dtype, device, seed)
            try:
                single = measure(lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=causal),
                                 *full, device, args.reps, args.warmup, ranks_together=False)
                _add_rates(single, flops, 1)
                for key in ("fwd", "bwd", "fwdbwd"):
                    ring[key + "_efficiency"] = (single[key + "_ms"]
                                                 / (world_size * ring[key + "_ms"]))
                    ring[key + "_speedup"] = single[key + "_ms"] / ring[key + "_ms"]
            except RuntimeError as error:  # e.g. out of memory at the longest S
                single = {"error": str(error).splitlines()[0][:200]}
            row["single"] = single
            del full
        dist.barrier()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def table(rows):
    lines = ["| S | causal | N | ring fwd+bwd ms | 1-device fwd+bwd ms | speedup | efficiency "
             "fwd / bwd / fwd+bwd | TFLOP/s per device (ring) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ring, single = r["ring"], r.get("single", {})
        if "fwdbwd_efficiency" in ring:
            eff = " / ".join("%.2f" % ring[k + "_efficiency"] for k in ("fwd", "bwd", "fwdbwd"))
            speedup, t1 = "%.2f" % ring["fwdbwd_speedup"], "%.1f" % single["fwdbwd_ms"]
        else:
            eff, speedup, t1 = "-", "-", single.get("error", "-")
        seqlen = r["seqlen"]
        label = "%dk" % (seqlen // 1024) if seqlen % 1024 == 0 else str(seqlen)
        lines.append("| %s | %s | %d | %.1f | %s | %s | %s | %.0f |"
                     % (label, "yes" if r["causal"] else "no", r["world_size"],
                        ring["fwdbwd_ms"], t1, speedup, eff, ring["fwdbwd_tflops_per_device"]))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_ring: --device cuda but torch sees no GPU (use --device cpu for a smoke "
              "test over gloo)", file=sys.stderr)
        return 2
    device = init(args.device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    grid = [(s, c) for s in map(int, args.seqlens.split(",")) for c in causals]
    rows, t0 = [], time.time()
    for idx, (seqlen, causal) in enumerate(grid):
        rows.append(run_case(args, device, seqlen, causal, idx))
        if rank == 0:
            print("[%d/%d] S=%d causal=%s N=%d (%.0fs)" % (idx + 1, len(grid), seqlen, causal,
                                                          world_size, time.time() - t0),
                  file=sys.stderr, flush=True)
    if rank == 0:
        meta = {"device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                           else "cpu"),
                "backend": dist.get_backend(), "world_size": world_size,
                "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                "commit": os.environ.get("FLASHTRAIN_COMMIT", "unknown"),
                "reps": args.reps, "warmup": args.warmup}
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "results": rows}, f, indent=1)
        print(table(rows))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
