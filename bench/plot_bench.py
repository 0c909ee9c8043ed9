#!/usr/bin/env python3
"""Plots a bench_attention.py JSON: TFLOP/s of fwd, bwd and fwd+bwd against sequence length for
flashtrain, torch SDPA flash (FlashAttention-2) and cuDNN, one row of panels per (dtype, head dim,
causal) group present in the file. Needs matplotlib (no torch).

Example: bench/plot_bench.py bench/results/2026-12-02_run4/bench.json --out bench/results/2026-12-02_run4/bench.png
"""
import argparse
import json
import sys

BACKENDS = (("flashtrain", "flashtrain"), ("flash", "SDPA flash (FA2)"), ("cudnn", "SDPA cuDNN"))
PASSES = (("fwd_tflops", "forward"), ("bwd_tflops", "backward"), ("fwdbwd_tflops", "forward + backward"))


def seq_label(seqlen):
    """Tick label of a sequence length: 512 -> 0.5k, 2048 -> 2k, 1000 -> 1000."""
    if seqlen % 1024 == 0:
        return f"{seqlen // 1024}k"
    if seqlen % 512 == 0:
        return f"{seqlen / 1024:g}k"
    return str(seqlen)


def draw(data, plt):
    """The figure of a bench_attention.py JSON (already loaded): a row of panels per group."""
    groups = {}
    for r in data["results"]:
        groups.setdefault((r["dtype"], r["dim"], r["causal"]), []).append(r)
    keys = sorted(groups)
    fig, axes = plt.subplots(len(keys), len(PASSES), figsize=(4.2 * len(PASSES), 3.0 * len(keys)),
                             squeeze=False)
    for row, key in enumerate(keys):
        rows = sorted(groups[key], key=lambda r: r["seqlen"])
        for col, (metric, title) in enumerate(PASSES):
            ax = axes[row][col]
            missing = []
            for i, (name, label) in enumerate(BACKENDS):
                pts = [(r["seqlen"], r[name][metric]) for r in rows
                       if isinstance(r.get(name), dict) and metric in r[name]]
                if pts:  # one color per backend in every panel, whichever are missing
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, color=f"C{i}")
                else:
                    missing.append(label)
            if missing:
                ax.text(0.02, 0.02, "no data: " + ", ".join(missing), transform=ax.transAxes, fontsize=7)
            ax.set_xscale("log", base=2)
            ax.set_xticks([r["seqlen"] for r in rows], [seq_label(r["seqlen"]) for r in rows])
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            dtype, dim, causal = key
            ax.set_title(f"{title}: {dtype} D={dim} {'causal' if causal else 'non-causal'}", fontsize=9)
            if col == 0:
                ax.set_ylabel("TFLOP/s")
            if row == len(keys) - 1:
                ax.set_xlabel("sequence length")
    axes[0][0].legend(fontsize=8)
    meta = data.get("meta", {})
    fig.suptitle(f"{meta.get('gpu', '')}, torch {meta.get('torch', '')}, {meta.get('date', '')}", fontsize=10, y=0.999, va="top")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))  # room for the title above the top row
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="output of bench/bench_attention.py --json")
    ap.add_argument("--out", required=True, help="PNG to write")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: matplotlib is not installed; nothing plotted", file=sys.stderr)
        return 1
    with open(args.json) as f:
        data = json.load(f)
    fig = draw(data, plt)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
