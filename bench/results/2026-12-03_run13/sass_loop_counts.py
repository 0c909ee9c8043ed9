#!/usr/bin/env python3
"""Instruction counts of the sm90 backward's main loop, from `cuobjdump -sass` listings: the
smallest backward branch (loop) that holds the step's 32 HGMMAs, per opcode, for two builds.

Usage: cuobjdump -sass -fun <mangled bwd_kernel_sm90 name> obj.o > x.sass  (for each build)
       python3 sass_loop_counts.py NEW.sass BASE.sass
"""
import collections
import re
import sys


def main_loop(path):
    ins = []
    for line in open(path):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    best = None
    for addr, text in ins:
        m = re.search(r"BRA\b.*?(0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
        if sum("HGMMA" in t for t in body) >= 32 and (best is None or len(body) < len(best)):
            best = body
    ops = collections.Counter(re.sub(r"^@!?U?P\w+ ", "", t).split()[0].split(".")[0] for t in best)
    return len(best), ops


(n_new, new), (n_base, base) = main_loop(sys.argv[1]), main_loop(sys.argv[2])
print(f"main loop: {n_new} instructions ({sys.argv[1]}) vs {n_base} ({sys.argv[2]}): {n_new - n_base:+d}")
print(f"{'opcode':12s} {'new':>5s} {'base':>5s} {'diff':>5s}")
for op in sorted(set(new) | set(base), key=lambda o: -(new[o] - base[o])):
    if new[op] != base[op]:
        print(f"{op:12s} {new[op]:5d} {base[op]:5d} {new[op] - base[op]:+5d}")
