#!/usr/bin/env python3
"""What the overflow guard costs: flashtrain's speed with the guard built in over the same code
built with -DFLASHTRAIN_GUARD=OFF (issue #5's bar: at least 0.98x, forward+backward).

Both builds load into this one process: the unguarded extension is built with
-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_noguard (or --unguarded-namespace), so its operators
are torch.ops.flashtrain_noguard.fwd / bwd next to torch.ops.flashtrain.*. Each case times the
raw operators (no autograd: the same work for both) rep by rep in alternation, guarded then
unguarded then unguarded then guarded, ..., each rep between its own CUDA events, and compares
the medians. Timing the two builds in separate processes (the former method) left a drift of a
few percent between processes, as large as the bar, in either direction.

A second table adds up the GPU kernel time per forward+backward of each build (torch.profiler,
the builds profiled one after the other at the smallest sequence length) and what the guard's
safe-pass kernels take when they exit at once.

Usage:
  python3 bench/guard_cost.py --guarded build-gpu/python/flashtrain/libflashtrain_torch.so \\
      --unguarded build-noguard/python/flashtrain/libflashtrain_torch.so [--reps 30] \\
      [--seqlens 1024,4096,16384] [--dims 64,128] [--dtypes bf16,fp16] [--markdown FILE] [--json FILE]
"""
import argparse
import json
import os
import sys
import time

from profile_kernels import kernel_times
from timing import interleaved_medians

BAR = 0.98
TOKENS, HIDDEN = 16384, 2048  # bench_attention.py's grid: B * S and H * D


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--guarded", required=True, help="libflashtrain_torch.so of the normal build")
    ap.add_argument("--unguarded", required=True, help="libflashtrain_torch.so built with -DFLASHTRAIN_GUARD=OFF "
                    "-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_noguard")
    ap.add_argument("--guarded-namespace", default="flashtrain",
                    help="torch.ops namespace of the guarded build's operators (flashtrain_b for a "
                    "scripts/gpu_ab.sh tree-B build)")
    ap.add_argument("--unguarded-namespace", default="flashtrain_noguard",
                    help="torch.ops namespace of the unguarded build's operators")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--reps", type=int, default=30, help="timed forward+backward passes per build and case")
    ap.add_argument("--profile-passes", type=int, default=20, help="passes per build in the kernel-time table")
    ap.add_argument("--markdown", help="write the tables to this markdown file")
    ap.add_argument("--json", help="write both builds' timings to this JSON file")
    return ap.parse_args()


def load_builds(args):
    """{"guarded": ops, "unguarded": ops}, the torch.ops namespaces of the two extensions."""
    import torch
    for lib in (args.guarded, args.unguarded):
        if not os.path.isfile(lib):
            raise FileNotFoundError(f"no such library: {lib}")
    torch.ops.load_library(os.path.abspath(args.guarded))
    torch.ops.load_library(os.path.abspath(args.unguarded))
    ops = {"guarded": getattr(torch.ops, args.guarded_namespace),
           "unguarded": getattr(torch.ops, args.unguarded_namespace)}
    for tag, ns in ops.items():
        try:
            ns.fwd
        except (AttributeError, RuntimeError) as e:
            raise RuntimeError(f"the {tag} build registers no fwd operator in its namespace ({e}); were the "
                               f"builds configured with -DFLASHTRAIN_TORCH_OP_NAMESPACE="
                               f"{args.guarded_namespace} / {args.unguarded_namespace}?") from None
    return ops


def fwd_only(ops, q, k, v, dout, causal, deterministic=False):
    """One forward through the raw operators (flashtrain/ops.py's arguments; dout and
    deterministic unused): (out, lse)."""
    return ops.fwd(q, k, v, None, None, 0, 0, 0.0, None, causal, False, -1, -1, 0.0, None, None)


def bwd_only(ops, q, k, v, dout, out, lse, causal, deterministic=False):
    """The backward of that forward's (out, lse): (dq, dk, dv)."""
    return ops.bwd(dout, q, k, v, out, lse, None, None, 0, 0, 0.0, None, causal, False, -1, -1, 0.0, None, None,
                   deterministic)


def fwd_bwd(ops, q, k, v, dout, causal, deterministic=False):
    """One forward and one backward through the raw operators: (dq, dk, dv)."""
    out, lse = fwd_only(ops, q, k, v, dout, causal)
    return bwd_only(ops, q, k, v, dout, out, lse, causal, deterministic)


def time_case(ops, q, k, v, dout, causal, reps, deterministic=False, step=fwd_bwd):
    """Median ms of `step` (forward+backward by default) per build ({tag: torch.ops namespace}),
    the builds alternating rep by rep (A B, B A, ...: timing.interleaved_medians). Also used by
    ab_builds.py."""
    fns = {tag: (lambda ns=ns: step(ns, q, k, v, dout, causal, deterministic)) for tag, ns in ops.items()}
    return interleaved_medians(fns, reps)


def kernel_time(torch, ns, q, k, v, dout, causal, passes):
    """(total us of CUDA kernels per forward+backward, us of the guard's safe-pass kernels)."""
    rows = kernel_times(torch, lambda: fwd_bwd(ns, q, k, v, dout, causal), passes)
    # The safe pass's kernels: BwdPass::kSafe instantiations and the gated exact-D kernel.
    safe = sum(us for name, (_, us) in rows.items()
               if "BwdPass)1" in name or ("exact_dsum" in name and "true>" in name))
    return sum(us for _, us in rows.values()), safe


def main():
    args = parse_args()
    import torch
    if not torch.cuda.is_available():
        print("guard_cost: no CUDA device", file=sys.stderr)
        return 2
    try:
        ops = load_builds(args)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"guard_cost: {e}", file=sys.stderr)
        return 2
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    seqlens = [int(s) for s in args.seqlens.split(",")]
    grid = [(dt, int(d), s, c) for dt in args.dtypes.split(",") for d in args.dims.split(",")
            for s in seqlens for c in (False, True)]
    results, t0 = [], time.time()
    for idx, (dt, d, s, causal) in enumerate(grid):
        b, h = max(1, TOKENS // s), HIDDEN // d
        gen = torch.Generator(device="cuda").manual_seed(idx)
        q, k, v, dout = (torch.randn((b, s, h, d), device="cuda", dtype=dtypes[dt], generator=gen) for _ in range(4))
        ms = time_case(ops, q, k, v, dout, causal, args.reps)
        row = {"dtype": dt, "dim": d, "seqlen": s, "causal": causal, "batch": b, "heads": h,
               "guarded_ms": ms["guarded"], "unguarded_ms": ms["unguarded"]}
        if s == min(seqlens):
            for tag in ("guarded", "unguarded"):
                total, safe = kernel_time(torch, ops[tag], q, k, v, dout, causal, args.profile_passes)
                row[f"{tag}_kernel_us"], row[f"{tag}_safe_pass_us"] = total, safe
        results.append(row)
        print(f"[{idx + 1}/{len(grid)}] {dt} D={d} S={s} causal={causal} ({time.time() - t0:.0f}s)",
              file=sys.stderr, flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "commit": os.environ.get("FLASHTRAIN_COMMIT", "unknown"),
            "reps": args.reps}
    write_outputs(args, markdown(results, meta, args), meta, results)
    return 0


def write_outputs(args, table, meta, results):
    """Prints the table; writes it to args.markdown and the cases to args.json when given. Also
    used by ab_builds.py."""
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cases": results}, f, indent=1)


def markdown(results, meta, args):
    lines = [f"GPU {meta['gpu']}, torch {meta['torch']}, {meta['date']}, commit {meta['commit']}. Speed of the "
             f"guarded build over the build with -DFLASHTRAIN_GUARD=OFF, both loaded in one process: time "
             f"unguarded / time guarded, medians of {args.reps} forward+backward passes each through the raw "
             f"operators, the builds alternating pass by pass. Bar: >= {BAR}.", "",
             "| dtype | D | S | causal | ms guarded / unguarded | ratio | meets bar |", "|---|---|---|---|---|---|---|"]
    worst = None
    for r in results:
        ratio = r["unguarded_ms"] / r["guarded_ms"]
        worst = ratio if worst is None else min(worst, ratio)
        lines.append(f"| {r['dtype']} | {r['dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                     f"{r['guarded_ms']:.3f} / {r['unguarded_ms']:.3f} | {ratio:.3f} | "
                     f"{'yes' if ratio >= BAR else 'NO'} |")
    lines += ["", f"Worst ratio: {worst:.3f} (bar {BAR})." if worst is not None else "No cases."]
    profiled = [r for r in results if "guarded_kernel_us" in r]
    if profiled:
        lines += ["", f"GPU kernel time per forward+backward (torch.profiler, mean of {args.profile_passes} passes "
                  f"per build); safe pass: the guard's kernels, which exit at once when nothing overflowed.", "",
                  "| dtype | D | S | causal | kernel us guarded / unguarded | safe pass us | ratio |",
                  "|---|---|---|---|---|---|---|"]
        for r in profiled:
            lines.append(f"| {r['dtype']} | {r['dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                         f"{r['guarded_kernel_us']:.1f} / {r['unguarded_kernel_us']:.1f} | "
                         f"{r['guarded_safe_pass_us']:.1f} | "
                         f"{r['unguarded_kernel_us'] / r['guarded_kernel_us']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
