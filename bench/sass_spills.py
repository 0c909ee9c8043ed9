#!/usr/bin/env python3
"""Where a kernel's local-memory traffic (spills) sits, from `cuobjdump -sass`.

Reads a SASS listing (a file, or standard input) and prints, for each function with STL / LDL
instructions, how many lie in the part of the code run by the warpgroups that raised their
registers (from USETMAXREG.TRY_ALLOC to USETMAXREG.DEALLOC in address order: the consumers of the
sm90 kernels, whose code ptxas lays out first) and how many elsewhere (the producer warpgroup,
which runs with 24-40 registers after its DEALLOC, and code before the split).

What it is for: ptxas reports a kernel's spilled bytes as one number, but a few bytes in the
24-register statistics warps cost nothing while one register spilled in the consumers' loop costs
a store and a reload every step. Run 62 (bench/results/2026-12-07_run62): a change to code only
the statistics warps run moved a spill into the consumers' loop (the whole kernel's registers are
allocated at once) and the bf16 D 64 backward lost up to 9%; ptxas's total went down. A consumer
spill may still lie outside the loop (main's D 64 forward: one STL as a work tile starts, one LDL
before its first S GEMM, once a tile): read the listing around it. Used by
scripts/ptxas_check.sh --spills.
  .sass-tools/cuobjdump -sass file.cubin | python3 bench/sass_spills.py
"""
import argparse
import subprocess
import sys

from sass_order import listing, opcode


def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return name


def split_spills(body):
    """(raised STL, raised LDL, other STL, other LDL) of one function's instructions."""
    ops = [opcode(i) for _, i in body]
    alloc = next((k for k, op in enumerate(ops) if op.startswith("USETMAXREG.TRY_ALLOC")), None)
    dealloc = next((k for k, op in enumerate(ops) if op.startswith("USETMAXREG.DEALLOC")), None)
    lo = alloc if alloc is not None else len(ops)
    hi = dealloc if dealloc is not None and dealloc > lo else len(ops)
    counts = [0, 0, 0, 0]
    for k, op in enumerate(ops):
        kind = 0 if op.startswith("STL") else 1 if op.startswith("LDL") else None
        if kind is not None:
            counts[kind + (0 if lo <= k < hi else 2)] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sass", nargs="?", help="cuobjdump -sass output (default: standard input)")
    args = parser.parse_args()
    lines = open(args.sass).read().splitlines() if args.sass else sys.stdin.read().splitlines()
    for name, body in listing(lines):
        rs, rl, os_, ol = split_spills(body)
        if rs + rl + os_ + ol:
            print(f"  local memory  {demangle(name)}: raised-register warps {rs} STL / {rl} LDL, "
                  f"other warps {os_} STL / {ol} LDL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
