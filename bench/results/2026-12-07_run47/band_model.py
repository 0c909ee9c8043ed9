#!/usr/bin/env python3
"""List-scheduling model of the sm90 backward's causal launch order (bwd_block_coords): blocks of
one key tile each, one resident block per SM, launched in grid order onto whichever SM frees first.
Key tile n (bn keys, Sq = Sk, bottom-right causal) walks S / bm - floor(bn n / bm) Q tiles, plus
FIXED steps of prologue and epilogue; units (batch x heads) go band by band, tile-major within a
band. Prints the makespan over its lower bound (total work / SMs) for the band the L2 rule picks
(bwd_launch_template_sm90.h: half of L2 over D (8 S + 4 S) bytes a unit) and for larger bands.
The bench grid's shapes: B * S = 16k tokens, 2048 / D heads. A model only: uniform step cost, no
L2 effects (what a larger band may cost is what the device run measures). --tail T also prints
each band N as N/T: bands of N, then the last T units as one band (FLASHTRAIN_BWD_BAND=N/T, run 63).
  python3 bench/results/2026-12-07_run47/band_model.py [--sms 132] [--l2-mb 50] [--fixed 3] [--tail T]"""
import argparse
import heapq


def blocks(S, units, bn, bm, band, fixed, tail=0):
    nb, mt = (S + bn - 1) // bn, S // bm
    banded = units - tail if 0 < tail < units else units
    sizes = [min(band, banded - first) for first in range(0, banded, band)] + [units - banded] * (banded < units)
    out = []
    for size in sizes:
        for n in range(nb):
            out += [mt - (bn * n) // bm + fixed] * size
    return out


def makespan_ratio(work, sms):
    free = [0.0] * sms
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free) / (sum(work) / sms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--l2-mb", type=float, default=50.0)
    ap.add_argument("--fixed", type=float, default=3.0, help="steps' worth of a block's fixed cost")
    ap.add_argument("--tail", type=int, default=0, help="also each band N with the last T units one band")
    a = ap.parse_args()
    l2 = a.l2_mb * 1024 * 1024
    for d, bm, bn in [(64, 128, 128), (128, 64, 128), (256, 64, 80)]:
        for s in [2048, 4096, 8192, 16384]:
            units = max(1, 16384 // s) * (2048 // d)
            rule = max(1, min(units, int(0.5 * l2 // (d * 12.0 * s))))
            bands = sorted({rule, min(units, 2 * rule), min(units, 4 * rule), units})
            cells = [f"band {b}: {makespan_ratio(blocks(s, units, bn, bm, b, a.fixed), a.sms):.3f}" for b in bands]
            if 0 < a.tail < units:
                cells += [f"band {b}/{a.tail}: {makespan_ratio(blocks(s, units, bn, bm, b, a.fixed, a.tail), a.sms):.3f}"
                          for b in sorted({1, rule, 4}) if b < units - a.tail]
            print(f"D {d:3d} S {s:5d} units {units:3d} (rule {rule:2d})  " + "  ".join(cells))


if __name__ == "__main__":
    main()
