#!/usr/bin/env python3
"""Summarises an ab_builds.py JSON (scripts/gpu_ab.sh's ab.json): for each (head dim, mask,
mode) group, the range over its rows (dtypes, sequence lengths) of build B's forward speed over
A's and of its backward speed over A's.

    python3 bench/ab_summary.py bench/results/2026-12-06_run36/call1/ab.json
"""
import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="ab.json written by bench/ab_builds.py --json")
    args = parser.parse_args()
    with open(args.json) as f:
        cases = json.load(f)["cases"]
    groups = {}
    for c in cases:
        key = (c["dim"], "causal" if c["causal"] else "no mask", "deterministic" if c["deterministic"] else "default")
        groups.setdefault(key, []).append(c)
    print("| D | mask | mode | forward B / A | backward B / A | rows |")
    print("|---|---|---|---|---|---|")
    for (dim, mask, mode), rows in sorted(groups.items()):
        fwd = [c["a_fwd_ms"] / c["b_fwd_ms"] for c in rows]
        bwd = [c["bwd_ratio"] for c in rows]
        print(f"| {dim} | {mask} | {mode} | {min(fwd):.3f}-{max(fwd):.3f} | {min(bwd):.3f}-{max(bwd):.3f} | {len(rows)} |")


if __name__ == "__main__":
    main()
