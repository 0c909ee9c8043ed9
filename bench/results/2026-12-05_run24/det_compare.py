#!/usr/bin/env python3
"""Deterministic D 256 backward before and after a change (run 24: call 1 against run 23 call 2, call 2 against call 1),
two runs on H100s: per row the same-run ratios det / default and det / FA2 (SDPA flash) backward,
and their quotient after / before. Usage: det_compare.py BEFORE.json AFTER.json > det_compare.md"""
import json
import sys

if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)


def rows(path):
    data = json.load(open(path))
    return data["meta"], {(r["dtype"], r["dim"], r["seqlen"], r["causal"]): r for r in data["results"]}


meta_a, a = rows(sys.argv[1])
meta_b, b = rows(sys.argv[2])


def ratios(r):
    det = r["flashtrain_det"]["bwd_ms"]
    return r["flashtrain"]["bwd_ms"] / det, r["flash"]["bwd_ms"] / det


print(f"Before: {sys.argv[1]} ({meta_a.get('gpu', '?')}, commit {meta_a.get('commit', '?')}); "
      f"after: {sys.argv[2]} ({meta_b.get('gpu', '?')}, commit {meta_b.get('commit', '?')}). "
      "Backward speed ratios within each run; the last two columns are after over before.\n")
print("| dtype | D | S | causal | det / default before | after | det / FA2 before | after | det / default after / before | det / FA2 after / before |")
print("|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(set(a) & set(b)):
    if key[1] != 256 or "flashtrain_det" not in a[key] or "flashtrain_det" not in b[key]:
        continue
    (da, fa), (db, fb) = ratios(a[key]), ratios(b[key])
    print(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {da:.2f} | {db:.2f} | {fa:.2f} | {fb:.2f} "
          f"| {db / da:.2f} | {fb / fa:.2f} |")
