#!/usr/bin/env python3
"""What the overflow guard costs: flashtrain's speed with the guard built in over the same code
built with -DFLASHTRAIN_GUARD=OFF (issue #5's bar: at least 0.98x, forward+backward).

The two builds are two copies of libflashtrain_torch.so, which cannot share a process (they
register the same torch ops), so each is timed by bench/bench_attention.py --backends flashtrain
in its own process, alternating guarded / unguarded for --rounds rounds; a case's time is the
best of its rounds' medians, which takes out most of the drift between processes.

With --kernel-time it also runs bench/profile_kernels.py --table once per build at the smallest
sequence length (every dim, dtype and causal setting in one process) and adds a table of GPU
kernel time per forward+backward (torch.profiler): the guard's cost without the run-to-run
noise of wall-clock medians, and what its safe-pass kernels take when they exit at once.

Usage:
  python3 bench/guard_cost.py --guarded build-gpu/python/flashtrain/libflashtrain_torch.so \\
      --unguarded build-noguard/python/flashtrain/libflashtrain_torch.so [--rounds 2] \\
      [--seqlens 1024,4096,16384] [--dims 64,128] [--dtypes bf16,fp16] [--kernel-time] [--markdown FILE]
      [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BAR = 0.98


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--guarded", required=True, help="libflashtrain_torch.so of the normal build")
    ap.add_argument("--unguarded", required=True, help="libflashtrain_torch.so built with -DFLASHTRAIN_GUARD=OFF")
    ap.add_argument("--rounds", type=int, default=2, help="guarded/unguarded alternations")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--kernel-time", action="store_true",
                    help="also compare GPU kernel time per forward+backward (profile_kernels.py --table)")
    ap.add_argument("--markdown", help="write the table to this markdown file")
    ap.add_argument("--json", help="write both builds' timings to this JSON file")
    return ap.parse_args()


def time_build(lib, args, tmp, tag):
    """Runs bench_attention.py on one build; returns its results keyed by case."""
    out = os.path.join(tmp, f"{tag}.json")
    env = dict(os.environ, FLASHTRAIN_TORCH_LIBRARY=os.path.abspath(lib))
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_attention.py"),
           "--backends", "flashtrain", "--seqlens", args.seqlens, "--dims", args.dims,
           "--dtypes", args.dtypes, "--reps", str(args.reps), "--json", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        data = json.load(f)
    cases = {}
    for r in data["results"]:
        entry = r.get("flashtrain", {})
        if "error" in entry:
            raise RuntimeError(f"{lib}: {r['dtype']} D={r['dim']} S={r['seqlen']}: {entry['error']}")
        cases[(r["dtype"], r["dim"], r["seqlen"], r["causal"])] = entry
    return cases, data["meta"]


def kernel_times(lib, args, tmp, tag):
    """profile_kernels.py --table on one build: {(dtype, dim, causal): table} at the smallest S."""
    out = os.path.join(tmp, f"{tag}_kernels.json")
    env = dict(os.environ, FLASHTRAIN_TORCH_LIBRARY=os.path.abspath(lib))
    seq = min(int(x) for x in args.seqlens.split(","))
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile_kernels.py"),
           "--table", "--seq", str(seq), "--dim", args.dims, "--dtype", args.dtypes, "--causal", "no,yes",
           "--iters", "20", "--json", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return {(t["dtype"], t["dim"], t["causal"]): t for t in json.load(f)}


def kernel_time_lines(guarded, unguarded):
    """Markdown lines comparing total kernel time per forward+backward of the two builds."""
    lines = ["", "GPU kernel time per forward+backward (torch.profiler, mean of 20 passes, same shapes); "
             "safe pass: the guard's kernels, which exit at once when nothing overflowed.", "",
             "| dtype | D | S | causal | kernel us guarded / unguarded | safe pass us | ratio | meets bar |",
             "|---|---|---|---|---|---|---|---|"]
    for key in sorted(guarded):
        g, u = guarded[key], unguarded.get(key)
        if u is None:
            continue
        safe = sum(k["us"] for k in g["kernels"] if "BwdPass)1" in k["kernel"] or
                   ("exact_dsum" in k["kernel"] and "true>" in k["kernel"]))
        r = u["total_us"] / g["total_us"]
        lines.append(f"| {key[0]} | {key[1]} | {g['seq']} | {'yes' if key[2] else 'no'} | {g['total_us']:.1f} / "
                     f"{u['total_us']:.1f} | {safe:.1f} | {r:.3f} | {'yes' if r >= BAR else 'NO'} |")
    return lines


def main():
    args = parse_args()
    for lib in (args.guarded, args.unguarded):
        if not os.path.isfile(lib):
            print(f"guard_cost: no such library: {lib}", file=sys.stderr)
            return 2
    best = {"guarded": {}, "unguarded": {}}
    meta = None
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for tag, lib in (("guarded", args.guarded), ("unguarded", args.unguarded)):
                cases, meta = time_build(lib, args, tmp, f"{tag}{rnd}")
                for key, e in cases.items():
                    prev = best[tag].get(key)
                    best[tag][key] = {k: min(e[k], prev[k]) if prev else e[k]
                                      for k in ("fwd_ms", "bwd_ms", "fwdbwd_ms")}
                print(f"round {rnd + 1}/{args.rounds}: {tag} timed ({time.time() - t0:.0f}s)",
                      file=sys.stderr, flush=True)
        kernels = None
        if args.kernel_time:
            kernels = {tag: kernel_times(lib, args, tmp, tag)
                       for tag, lib in (("guarded", args.guarded), ("unguarded", args.unguarded))}
            print(f"kernel times profiled ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    lines = [f"GPU {meta['gpu']}, torch {meta['torch']}, {meta['date']}, commit {meta['commit']}. "
             f"Speed of the guarded build over the build with -DFLASHTRAIN_GUARD=OFF (time unguarded / "
             f"time guarded; best of {args.rounds} alternating rounds of bench_attention.py medians). "
             f"Bar: fwd+bwd >= {BAR}. The guard does not touch the forward: its column shows the noise "
             f"between the two processes.", "",
             "| dtype | D | S | causal | fwd+bwd ms guarded / unguarded | fwd+bwd | bwd | fwd (noise) | meets bar |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst = None
    for key in sorted(best["guarded"]):
        g, u = best["guarded"][key], best["unguarded"][key]
        r_all = u["fwdbwd_ms"] / g["fwdbwd_ms"]
        r_bwd = u["bwd_ms"] / g["bwd_ms"]
        r_fwd = u["fwd_ms"] / g["fwd_ms"]
        worst = r_all if worst is None else min(worst, r_all)
        dt, d, s, causal = key
        lines.append(f"| {dt} | {d} | {s} | {'yes' if causal else 'no'} | {g['fwdbwd_ms']:.3f} / "
                     f"{u['fwdbwd_ms']:.3f} | {r_all:.3f} | {r_bwd:.3f} | {r_fwd:.3f} | {'yes' if r_all >= BAR else 'NO'} |")
    lines += ["", f"Worst fwd+bwd ratio: {worst:.3f} (bar {BAR})."]
    if kernels:
        lines += kernel_time_lines(kernels["guarded"], kernels["unguarded"])
    table = "\n".join(lines) + "\n"
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rounds": args.rounds, "kernel_time": kernels and
                       [{"dtype": k[0], "dim": k[1], "causal": k[2], "guarded": kernels["guarded"][k],
                         "unguarded": kernels["unguarded"].get(k)} for k in sorted(kernels["guarded"])],
                       "cases": [{"dtype": k[0], "dim": k[1], "seqlen": k[2], "causal": k[3],
                                  "guarded": best["guarded"][k], "unguarded": best["unguarded"][k]}
                                 for k in sorted(best["guarded"])]}, f, indent=1)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
