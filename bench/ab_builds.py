#!/usr/bin/env python3
"""A/B of two builds of flashtrain's torch extension in one process: forward+backward time of
build B over build A on bench_attention.py's shapes (B * S = 16k tokens, H * D = 2048), the
forward's alone, and the backward's as their difference.

Build A registers its operators under torch.ops.flashtrain; build B must be configured with
-DFLASHTRAIN_TORCH_OP_NAMESPACE=flashtrain_b (or --b-namespace) so both load side by side. Each
case times the raw operators rep by rep in alternation (A B B A ...), each rep between its own
CUDA events, and compares medians (guard_cost.py's method): separate processes drift by a few
percent, as much as most changes under test. scripts/gpu_ab.sh builds both trees and runs this.
Each case also runs both builds once on the same inputs and reports how far B's outputs are from
A's (max |B - A| over max |A| for out, dq, dk, dv; 0 is bit for bit), so a change that must not
move the results shows it did not.

Two settings of one build: give the same library as --a and --b and set what differs with
--env-a / --env-b (NAME=VALUE, comma-separated), which are put into the environment before each of
that side's operator calls (for settings the library reads per call, e.g. FLASHTRAIN_FWD_KEY_TILE).

Usage:
  python3 bench/ab_builds.py --a build-ab-a/python/flashtrain/libflashtrain_torch.so \\
      --b build-ab-b/python/flashtrain/libflashtrain_torch.so [--labels main,branch] \\
      [--seqlens 1024,8192] [--dims 64,128] [--dtypes bf16] [--deterministic] [--reps 20] [--markdown FILE]
  python3 bench/ab_builds.py --a LIB --b LIB --labels t128,long --env-a FLASHTRAIN_FWD_KEY_TILE=128 \
      --env-b FLASHTRAIN_FWD_KEY_TILE=long --dims 64 --seqlens 2048,4096
"""
import argparse
import os
import sys
import time

from guard_cost import HIDDEN, TOKENS, bwd_only, fwd_only, time_case, write_outputs


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--a", required=True, help="libflashtrain_torch.so of build A (namespace flashtrain)")
    ap.add_argument("--b", required=True, help="libflashtrain_torch.so of build B")
    ap.add_argument("--b-namespace", default="flashtrain_b", help="torch.ops namespace of build B's operators")
    ap.add_argument("--labels", default="A,B", help="names of the two builds in the table")
    ap.add_argument("--seqlens", default="1024,8192")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--deterministic", action="store_true", help="also time deterministic=True")
    ap.add_argument("--reps", type=int, default=20, help="timed forward+backward passes per build and case")
    ap.add_argument("--env-a", default="", help="NAME=VALUE[,NAME=VALUE] set before each of A's operator calls")
    ap.add_argument("--env-b", default="", help="NAME=VALUE[,NAME=VALUE] set before each of B's operator calls")
    ap.add_argument("--markdown", help="write the table to this markdown file")
    ap.add_argument("--json", help="write the timings to this JSON file")
    return ap.parse_args()


class EnvOps:
    """An operator namespace whose calls first put `env` into the environment."""

    def __init__(self, ops, env):
        self.ops, self.env = ops, env

    def __getattr__(self, name):
        op = getattr(self.ops, name)

        def call(*args):
            os.environ.update(self.env)
            return op(*args)
        return call


def parse_env(text):
    """{NAME: VALUE} from 'NAME=VALUE,NAME=VALUE' ('' gives {})."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    bad = [p[0] for p in pairs if len(p) != 2 or not p[0]]
    if bad:
        raise SystemExit(f"ab_builds: expected NAME=VALUE, got {bad[0]!r}")
    return dict(pairs)


def relative_diff(a, b):
    """max |b - a| / max |a| over two tensors (max |b - a| where a is all zero); inf if b has a
    non-finite value where a does not."""
    a, b = a.double(), b.double()
    if not bool(b.isfinite().all()) and bool(a.isfinite().all()):
        return float("inf")
    scale = float(a.abs().max()) if a.numel() else 0.0
    diff = float((b - a).abs().max()) if a.numel() else 0.0
    return diff / scale if scale > 0 else diff


def output_diffs(a_ops, b_ops, q, k, v, dout, causal, deterministic):
    """B's out, dq, dk, dv against A's on one case: {name: relative_diff(A's, B's)}."""
    def outputs(ops):
        out, lse = fwd_only(ops, q, k, v, dout, causal)
        return (out, *bwd_only(ops, q, k, v, dout, out, lse, causal, deterministic))
    return {name: relative_diff(x, y) for name, x, y in zip(("out", "dq", "dk", "dv"), outputs(a_ops), outputs(b_ops))}


def format_diffs(diffs):
    """'out 0 / dq 2.1e-04 / ...' (0: bit for bit)."""
    return " / ".join(f"{name} {0 if x == 0 else format(x, '.1e')}" for name, x in diffs.items())


def main():
    args = parse_args()
    import torch
    if not torch.cuda.is_available():
        print("ab_builds: no CUDA device", file=sys.stderr)
        return 2
    label_a, label_b = args.labels.split(",")
    env_a, env_b = parse_env(args.env_a), parse_env(args.env_b)
    same = os.path.abspath(args.a) == os.path.abspath(args.b)
    for lib in (args.a,) if same else (args.a, args.b):
        if not os.path.isfile(lib):
            print(f"ab_builds: no such library: {lib}", file=sys.stderr)
            return 2
        torch.ops.load_library(os.path.abspath(lib))
    ops = {label_a: torch.ops.flashtrain, label_b: torch.ops.flashtrain if same else getattr(torch.ops, args.b_namespace)}
    if same and env_a == env_b:
        print("ab_builds: --a and --b are one library; set what differs with --env-a / --env-b", file=sys.stderr)
        return 2
    if (env_a or env_b) and set(env_a) != set(env_b):  # else one side's setting would stay for the other
        print("ab_builds: --env-a and --env-b must name the same variables", file=sys.stderr)
        return 2
    if env_a or env_b:
        ops = {label_a: EnvOps(ops[label_a], env_a), label_b: EnvOps(ops[label_b], env_b)}
    try:
        ops[label_b].fwd
    except (AttributeError, RuntimeError):
        print(f"ab_builds: build B registers no fwd in torch.ops.{args.b_namespace}; configure it with "
              f"-DFLASHTRAIN_TORCH_OP_NAMESPACE={args.b_namespace}", file=sys.stderr)
        return 2
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    modes = [False, True] if args.deterministic else [False]
    grid = [(dt, int(d), int(s), c, det) for dt in args.dtypes.split(",") for d in args.dims.split(",")
            for s in args.seqlens.split(",") for c in (False, True) for det in modes]
    results, t0 = [], time.time()
    fwd_cache = {}  # the forward does not depend on deterministic: timed once per (dtype, D, S, causal)
    for idx, (dt, d, s, causal, det) in enumerate(grid):
        b, h = max(1, TOKENS // s), HIDDEN // d
        gen = torch.Generator(device="cuda").manual_seed(idx)
        q, k, v, dout = (torch.randn((b, s, h, d), device="cuda", dtype=dtypes[dt], generator=gen) for _ in range(4))
        ms = time_case(ops, q, k, v, dout, causal, args.reps, deterministic=det)
        if (dt, d, s, causal) not in fwd_cache:
            fwd_cache[dt, d, s, causal] = time_case(ops, q, k, v, dout, causal, args.reps, step=fwd_only)
        fwd_ms = fwd_cache[dt, d, s, causal]
        diffs = output_diffs(ops[label_a], ops[label_b], q, k, v, dout, causal, det)
        bwd = (ms[label_a] - fwd_ms[label_a]) / (ms[label_b] - fwd_ms[label_b])
        # Forward 4 B S^2 H D flops (2 GEMMs), backward 2.5x that; causal half.
        flops = 3.5 * 4 * b * s * s * h * d * (0.5 if causal else 1.0)
        results.append({"dtype": dt, "dim": d, "seqlen": s, "causal": causal, "deterministic": det,
                        "a_ms": ms[label_a], "b_ms": ms[label_b],
                        "a_tflops": flops / ms[label_a] / 1e9, "b_tflops": flops / ms[label_b] / 1e9,
                        "a_fwd_ms": fwd_ms[label_a], "b_fwd_ms": fwd_ms[label_b], "bwd_ratio": bwd,
                        "diffs": diffs})
        fwd_note = f", forward {fwd_ms[label_a] / fwd_ms[label_b]:.3f}, backward {bwd:.3f}"
        print(f"[{idx + 1}/{len(grid)}] {dt} D={d} S={s} causal={causal} det={det}: {label_b}/{label_a} speed "
              f"{ms[label_a] / ms[label_b]:.3f}{fwd_note} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "a": label_a, "b": label_b, "reps": args.reps}
    lines = [f"GPU {meta['gpu']}, torch {meta['torch']}, {meta['date']}. Forward+backward, forward alone and backward (their difference) of "
             f"{label_b} over {label_a}, both builds in one process, medians of {args.reps} passes each, alternating "
             "pass by pass.",
             "", f"| dtype | D | S | causal | deterministic | ms {label_a} / {label_b} | TFLOP/s {label_a} / {label_b} "
             f"| speed {label_b} / {label_a} | forward ms {label_a} / {label_b} | forward speed {label_b} / {label_a} "
             f"| backward speed {label_b} / {label_a} | {label_b} against {label_a}: max diff / max |{label_a}| |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        fwd = f"{r['a_fwd_ms']:.3f} / {r['b_fwd_ms']:.3f} | {r['a_fwd_ms'] / r['b_fwd_ms']:.3f} | {r['bwd_ratio']:.3f}"
        lines.append(f"| {r['dtype']} | {r['dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                     f"{'yes' if r['deterministic'] else 'no'} | {r['a_ms']:.3f} / {r['b_ms']:.3f} | "
                     f"{r['a_tflops']:.0f} / {r['b_tflops']:.0f} | {r['a_ms'] / r['b_ms']:.3f} | {fwd} | "
                     f"{format_diffs(r['diffs'])} |")
    write_outputs(args, "\n".join(lines) + "\n", meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
