#!/usr/bin/env python3
"""Backward speed and deterministic ratio of two bench_attention.py JSON files, row by row.

Usage: python3 bench/compare_runs.py BEFORE.json AFTER.json > table.md
Rows present in both files; the FA2 column shows how much the reference moved between the runs.
"""
import json
import sys

if len(sys.argv) != 3 or sys.argv[1] in ('-h', '--help'):
    print(__doc__)
    sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ('-h', '--help') else 2)
a = {(r['dtype'], r['dim'], r['seqlen'], r['causal']): r for r in json.load(open(sys.argv[1]))['results']}
b = {(r['dtype'], r['dim'], r['seqlen'], r['causal']): r for r in json.load(open(sys.argv[2]))['results']}
print("| dtype | D | S | causal | bwd TFLOP/s run 5 | run 6 | change | FA2 bwd run 5 | run 6 | det/default run 5 | run 6 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(a):
    if k not in b: continue
    x, y = a[k], b[k]
    dx = x['flashtrain_det']['bwd_tflops'] / x['flashtrain']['bwd_tflops']
    dy = y['flashtrain_det']['bwd_tflops'] / y['flashtrain']['bwd_tflops']
    print(f"| {k[0]} | {k[1]} | {k[2]} | {'yes' if k[3] else 'no'} | {x['flashtrain']['bwd_tflops']:.0f} | {y['flashtrain']['bwd_tflops']:.0f} | "
          f"{y['flashtrain']['bwd_tflops'] / x['flashtrain']['bwd_tflops'] - 1:+.1%} | {x['flash']['bwd_tflops']:.0f} | {y['flash']['bwd_tflops']:.0f} | {dx:.2f} | {dy:.2f} |")
