#!/usr/bin/env python3
"""Backward speed and deterministic ratio of two bench_attention.py JSON files, row by row.

Rows present in both files; the FA2 column shows how much the reference moved between the runs.
Example: python3 bench/compare_runs.py BEFORE.json AFTER.json --labels "run 5,run 6" > table.md
"""
import argparse
import json


def rows(path):
    return {(r["dtype"], r["dim"], r["seqlen"], r["causal"]): r for r in json.load(open(path))["results"]}


def det_ratio(r):
    det = r.get("flashtrain_det")  # only with bench_attention.py --deterministic
    return "%.2f" % (det["bwd_tflops"] / r["flashtrain"]["bwd_tflops"]) if det else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--labels", default="before,after", help="column labels of the two runs")
    args = ap.parse_args()
    x_name, y_name = args.labels.split(",")
    before, after = rows(args.before), rows(args.after)
    print(f"| dtype | D | S | causal | bwd TFLOP/s {x_name} | {y_name} | change | FA2 bwd {x_name} | {y_name} "
          f"| det/default {x_name} | {y_name} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(before):
        if key not in after:
            continue
        x, y = before[key], after[key]
        ft_x, ft_y = x["flashtrain"]["bwd_tflops"], y["flashtrain"]["bwd_tflops"]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {ft_x:.0f} | {ft_y:.0f} | "
              f"{ft_y / ft_x - 1:+.1%} | {x['flash']['bwd_tflops']:.0f} | {y['flash']['bwd_tflops']:.0f} | "
              f"{det_ratio(x)} | {det_ratio(y)} |")


if __name__ == "__main__":
    main()
