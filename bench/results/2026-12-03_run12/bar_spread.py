#!/usr/bin/env python3
"""Recomputes issue #5's bars, with the 'runner-up' column the doctor prints since run 12 (torch's second best fused backend over
its best), from
the error tables of doctor runs saved before it (doctor_cuda_seed0.txt, doctor_seeds_1to5.txt).

Usage: PYTHONPATH=python python3 bench/results/2026-12-03_run12/bar_spread.py FILE ...
"""
import re
import sys

from flashtrain import doctor

ROW = re.compile(r"^(?P<case>.+?)\s{2,}(?P<backend>(flashtrain|sdpa)-[\w-]+)\s+(?P<out>\S+)\s+(?P<dq>\S+)\s+"
                 r"(?P<dk>\S+)\s+(?P<dv>\S+)\s+(?P<nonfinite>\d+)\s*$")


def tables(path):
    """(label, rows) per doctor run in the file: runs are separated by '=== command' lines, and a
    run is labelled by its --seed (0 when the command has none, or the file has no such line)."""
    runs, label, rows = [], "seed 0", []
    for line in open(path):
        if line.startswith("=== "):
            if rows:
                runs.append((label, rows))
            seed = re.search(r"--seed (\d+)", line)
            label, rows = "seed " + (seed.group(1) if seed else "0"), []
            continue
        m = ROW.match(line.rstrip("\n"))
        if m:
            r = m.groupdict()
            r.update({k: float(r[k]) for k in ("out", "dq", "dk", "dv")}, nonfinite=int(r["nonfinite"]))
            r["case"] = r["case"].strip()
            rows.append(r)
    if rows:
        runs.append((label, rows))
    return runs


def main(paths):
    print("%-8s %-36s %8s %8s %8s" % ("run", "case", "fused", "high", "runner-up"))
    for path in paths:
        for label, rows in tables(path):
            for b in doctor.bar_ratios(rows):
                cells = ["%8s" % "-" if b[k] is None else "%8.2f" % b[k] for k in ("fused", "high", "runner_up")]
                print("%-8s %-36s %s" % (label, b["case"], " ".join(cells)))


if __name__ == "__main__":
    main(sys.argv[1:])
