#!/usr/bin/env python3
"""Benchmark flashtrain against torch SDPA's flash (FlashAttention-2) and cuDNN backends.

Same process, same inputs (DESIGN.md §5): q, k, v live in BSHD memory as after a QKV projection;
torch SDPA receives the (B, H, S, D) transposed views of the same tensors. Grid: B*S = 16k tokens,
H*D = 2048, S in {512 .. 16k}, D in {64, 128, 256}, causal and not, bf16 and fp16. FLOPs: fwd =
4*B*H*S*S*D (halved when causal), bwd = 2.5 * fwd. Median of CUDA events after warm-up, with all
backends (and flashtrain's bwd variants) timed in alternation rep by rep, so that every ratio
compares times taken under the same clocks. Peak extra memory of fwd+bwd (torch's allocator) is
measured too.

Usage:
  python3 bench/bench_attention.py [--quick] [--json FILE] [--markdown FILE]
        [--seqlens 2048,8192] [--dims 64,128] [--dtypes bf16] [--causal both|yes|no] [--reps N]
        [--backends flashtrain,flash,cudnn] [--deterministic] [--precision-high]
"""
import argparse
import json
import math
import os
import sys
import time

import torch

from timing import interleaved_medians

TOKENS = 16384
HIDDEN = 2048


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small grid (S 2k/8k, D 64/128, bf16)")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per measurement")
    ap.add_argument("--deterministic", action="store_true",
                    help="also time flashtrain's bwd with deterministic=True (column 'det / default')")
    ap.add_argument("--precision-high", action="store_true",
                    help="also time flashtrain's bwd with precision='high' (column 'high / default')")
    ap.add_argument("--backends", default="flashtrain,flash,cudnn",
                    help="comma list of what to time: flashtrain, flash (SDPA FlashAttention-2), cudnn")
    ap.add_argument("--json", help="write all results to this JSON file")
    ap.add_argument("--markdown", help="write the ratio table to this markdown file")
    args = ap.parse_args()
    if args.quick:
        args.seqlens, args.dims, args.dtypes = "2048,8192", "64,128", "bf16"
    return args


def sdpa_runner(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run(q, k, v, causal):
        with sdpa_kernel([which]):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)
    return run


def flashtrain_runner(deterministic=False, precision="default"):
    import flashtrain

    def run(q, k, v, causal):
        return flashtrain.flash_attn_func(q, k, v, causal=causal, deterministic=deterministic,
                                          precision=precision)
    return run


# Variants of flashtrain's backward, timed on bwd only: (runner name, column label, keyword).
BWD_VARIANTS = (("flashtrain_det", "det / default", {"deterministic": True}),
                ("flashtrain_high", "high / default", {"precision": "high"}))


def peak_extra_mib(run, q, k, v, dout, causal):
    """Peak memory of one fwd+bwd beyond what is allocated before it, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o = run(q, k, v, causal)
    torch.autograd.grad(o, (q, k, v), dout)
    del o
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def measure_row(runners, variants, q, k, v, dout, causal, reps):
    """Times fwd, bwd and fwd+bwd of every runner and bwd of every variant on one shape, each kind
    with all runners in alternation (interleaved_medians). Returns name -> entry (ms and MiB, or
    {"error": message} for a runner that raised)."""
    entries, fwd, bwd, fwd_bwd, outs = {}, {}, {}, {}, {}
    for name, run in {**runners, **variants}.items():
        try:
            out = run(q, k, v, causal)
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        except Exception as e:
            entries[name] = {"error": str(e).splitlines()[0][:200]}
            continue
        outs[name] = out
        bwd[name] = lambda out=out: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        if name in runners:
            def fwd_only(run=run):
                with torch.no_grad():
                    run(q, k, v, causal)

            def fwd_then_bwd(run=run):
                torch.autograd.grad(run(q, k, v, causal), (q, k, v), dout)
            fwd[name], fwd_bwd[name] = fwd_only, fwd_then_bwd
    t_fwd = interleaved_medians(fwd, reps)
    t_bwd = interleaved_medians(bwd, reps)
    t_all = interleaved_medians(fwd_bwd, reps)
    del outs, bwd
    for name in t_bwd:
        entries[name] = {"bwd_ms": t_bwd[name]}
        if name in runners:
            entries[name].update(fwd_ms=t_fwd[name], fwdbwd_ms=t_all[name],
                                 peak_mib=peak_extra_mib(runners[name], q, k, v, dout, causal))
    return entries


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("bench_attention: no CUDA device; nothing to measure", file=sys.stderr)
        return 2
    wanted = args.backends.split(",")
    unknown = set(wanted) - {"flashtrain", "flash", "cudnn"}
    if unknown:
        print(f"bench_attention: unknown --backends {sorted(unknown)}; choose from flashtrain, flash, cudnn",
              file=sys.stderr)
        return 2
    runners = {name: sdpa_runner(name) for name in ("flash", "cudnn") if name in wanted}
    variants = {}
    if "flashtrain" in wanted:
        try:
            runners = {"flashtrain": flashtrain_runner(), **runners}
            wanted_variants = {"flashtrain_det": args.deterministic, "flashtrain_high": args.precision_high}
            variants = {name: flashtrain_runner(**kw) for name, _, kw in BWD_VARIANTS if wanted_variants[name]}
        except Exception as e:  # the table still shows torch's backends, and why flashtrain is absent
            print(f"bench_attention: flashtrain not importable: {e}", file=sys.stderr)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    grid = [(dt, d, s, c) for dt in args.dtypes.split(",") for d in map(int, args.dims.split(","))
            for s in map(int, args.seqlens.split(",")) for c in causals]
    results = []
    t0 = time.time()
    for idx, (dt, d, s, causal) in enumerate(grid):
        b, h = max(1, TOKENS // s), HIDDEN // d
        gen = torch.Generator(device="cuda").manual_seed(idx)
        shape = (b, s, h, d)
        q, k, v, dout = (torch.randn(shape, device="cuda", dtype=dtypes[dt], generator=gen)
                         for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        row = {"dtype": dt, "dim": d, "seqlen": s, "batch": b, "heads": h, "causal": causal}
        for name, e in measure_row(runners, variants, q, k, v, dout, causal, args.reps).items():
            if "bwd_ms" in e:
                e["bwd_tflops"] = 2.5 * flops / e["bwd_ms"] / 1e9
            if "fwd_ms" in e:
                e.update(fwd_tflops=flops / e["fwd_ms"] / 1e9, fwdbwd_tflops=3.5 * flops / e["fwdbwd_ms"] / 1e9)
            row[name] = e
        results.append(row)
        print(f"[{idx + 1}/{len(grid)}] {dt} D={d} S={s} causal={causal} "
              f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()

    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d"),
            "commit": os.environ.get("FLASHTRAIN_COMMIT", "unknown")}
    table = markdown_table(results, meta)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    print(table)
    return 0


def fmt(entry, key):
    if not entry or "error" in entry:
        return "err"
    return f"{entry[key]:.0f}"


def ratio(row, a, b, key):
    ea, eb = row.get(a), row.get(b)
    if not ea or not eb or "error" in ea or "error" in eb:
        return "-"
    return f"{ea[key] / eb[key]:.2f}"


def markdown_table(results, meta):
    shown = [(name, label) for name, label, _ in BWD_VARIANTS if any(name in r for r in results)]
    notes = {"flashtrain_det": " det / default: bwd speed of deterministic=True over the default.",
             "flashtrain_high": " high / default: bwd speed of precision=\"high\" over the default."}
    lines = [f"GPU {meta['gpu']}, torch {meta['torch']}, cuDNN {meta['cudnn']}, {meta['date']}, "
             f"commit {meta['commit']}. TFLOP/s fwd / bwd / fwd+bwd; ratios are flashtrain over "
             "the backend, fwd+bwd (fwd). Peak extra MiB of fwd+bwd."
             + "".join(notes[name] for name, _ in shown), "",
             "| dtype | D | S | causal | flashtrain | FA2 (SDPA flash) | cuDNN | vs FA2 | vs cuDNN | MiB ft/FA2/cuDNN |"
             + "".join(f" {label} |" for _, label in shown),
             "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(shown)]
    for r in results:
        cells = []
        for name in ("flashtrain", "flash", "cudnn"):
            e = r.get(name)
            if e and "error" not in e:
                cells.append(f"{fmt(e, 'fwd_tflops')} / {fmt(e, 'bwd_tflops')} / {fmt(e, 'fwdbwd_tflops')}")
            else:
                cells.append("err: " + (e or {}).get("error", "absent")[:40])
        mem = "/".join(fmt(r.get(n), "peak_mib") for n in ("flashtrain", "flash", "cudnn"))
        lines.append(f"| {r['dtype']} | {r['dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                     f"{cells[0]} | {cells[1]} | {cells[2]} | "
                     f"{ratio(r, 'flashtrain', 'flash', 'fwdbwd_tflops')} ({ratio(r, 'flashtrain', 'flash', 'fwd_tflops')}) | "
                     f"{ratio(r, 'flashtrain', 'cudnn', 'fwdbwd_tflops')} ({ratio(r, 'flashtrain', 'cudnn', 'fwd_tflops')}) | {mem} |"
                     + "".join(f" {ratio(r, name, 'flashtrain', 'bwd_tflops')} |" for name, _ in shown))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
